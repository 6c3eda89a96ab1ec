// A tiny byte-level BPE tokenizer for tests: ids 0-2 are <|endoftext|>, <|im_start|> and
// <|im_end|> (so a test checkpoint's eos_token_id 2 is <|im_end|>), ids 3-258 the 256 bytes in
// GPT-2's byte-to-unicode alphabet, no merges, and a ChatML chat template. Fits any model
// vocabulary of at least 259 (the test checkpoints have 512).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"

namespace ridge::testing {

// GPT-2's bytes_to_unicode as UTF-8 strings, indexed by byte.
inline std::string ByteLevelChar(int byte) {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int code = byte;
  if (!printable(byte)) {
    int n = 0;
    for (int b = 0; b < byte; ++b) n += printable(b) ? 0 : 1;
    code = 256 + n;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

inline int TinyTokenId(unsigned char byte) { return 3 + byte; }

inline nlohmann::json TinyTokenizerJson() {
  using nlohmann::json;
  json added = json::array();
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json vocab = json::object();
  for (int i = 0; i < 3; ++i) vocab[specials[i]] = i;
  for (int b = 0; b < 256; ++b)
    vocab[ByteLevelChar(b)] = TinyTokenId(static_cast<unsigned char>(b));
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", json::array()}}}};
}

inline nlohmann::json TinyTokenizerConfigJson() {
  return {{"tokenizer_class", "Qwen2Tokenizer"},
          {"bos_token", nullptr},
          {"eos_token", "<|im_end|>"},
          {"pad_token", "<|endoftext|>"},
          {"add_bos_token", false},
          {"chat_template",
           "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' "
           "%}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif "
           "%}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
           "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
           "endif %}"}};
}

// Writes tokenizer.json and tokenizer_config.json into `dir` (created if needed).
inline void WriteTinyTokenizer(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << TinyTokenizerJson().dump();
  std::ofstream(dir / "tokenizer_config.json") << TinyTokenizerConfigJson().dump();
}

}  // namespace ridge::testing
