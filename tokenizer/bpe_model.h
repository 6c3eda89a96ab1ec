// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked merges,
// unknown-token and byte-fallback handling. Turns one pre-tokenized word into ids exactly as
// Hugging Face's `tokenizers` does (same merge order, same unk fusing, same fallback quirks).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/word_cache.h"

namespace ridge {

class BpeModel {
 public:
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& model);

  // Appends the ids of `word` to `out`. Thread-safe.
  void Tokenize(std::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token of `id`, or nullptr when the model has no such id.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  BpeModel() = default;
  void MergeWord(std::string_view word, std::vector<int32_t>* out) const;

  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_present_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  // Byte-fallback ids "<0x00>".."<0xFF>", -1 where the vocabulary lacks one.
  std::vector<int32_t> byte_ids_;
  mutable WordCache cache_;
};

}  // namespace ridge
