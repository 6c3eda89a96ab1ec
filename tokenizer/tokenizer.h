// A Hugging Face tokenizer.json (+ tokenizer_config.json) loaded for encoding and decoding,
// byte-exact with the `tokenizers` library for the supported components (see README.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace ridge {

class Tokenizer {
 public:
  // Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::filesystem::path& dir);
  // The same from file contents; `config_json` may be empty.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                             std::string_view config_json);

  // Encodes UTF-8 `text`; invalid UTF-8 is InvalidArgument (clean it first with
  // ReplaceInvalidUtf8 from tokenizer/utf8.h to get what Python's errors="replace" gives).
  // Thread-safe.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;
  // Decodes ids; an id that names no token is InvalidArgument. Thread-safe.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string of `id` (added tokens first, then the model's), if any.
  std::optional<std::string_view> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The bytes token `id` adds to decoded text when it is not the text's first token: raw bytes,
  // so a token holding part of a character gives that part (Decode would write U+FFFD). An added
  // token's content goes through the decoder as in Decode. Empty for an id that names no token.
  std::string TokenBytes(int32_t id) const;

  // One past the largest id: the size a model's embedding table must have.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const TokenizerConfig& config() const { return config_; }

 private:
  Tokenizer() = default;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
  SpecialTokenFrame frame_;
  TokenizerConfig config_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace ridge
