// A 512-token byte-level BPE tokenizer for tests, matching the vocabulary size of the test
// checkpoints (tests/data/mesanet): GPT-2's 256 byte tokens and its first 256 merges, cut out of
// tests/data/tokenizer/gpt2/tokenizer.json. Any UTF-8 text encodes (bytes are always in the
// vocabulary) and every id a test model samples decodes.
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace ridge::testing {

inline absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTinyTokenizer(const std::string& data_dir) {
  std::ifstream in(data_dir + "/tokenizer/gpt2/tokenizer.json");
  if (!in) return absl::NotFoundError("tests/data/tokenizer/gpt2/tokenizer.json not found");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str());
  constexpr int kVocab = 512;
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [token, id] : json["model"]["vocab"].items()) {
    if (id.get<int>() < kVocab) vocab[token] = id;
  }
  nlohmann::json merges = nlohmann::json::array();
  // GPT-2's merge i creates id 256 + i.
  for (int i = 0; i < kVocab - 256; ++i) merges.push_back(json["model"]["merges"][i]);
  json["model"]["vocab"] = vocab;
  json["model"]["merges"] = merges;
  json["added_tokens"] = nlohmann::json::array();
  return Tokenizer::FromJson(json.dump(), "");
}

}  // namespace ridge::testing
