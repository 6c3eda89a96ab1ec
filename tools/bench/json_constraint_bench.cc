// The cost of JSON mode's mask (sampling/json_constraint.h) per pick, on the host: a real
// tokenizer's vocabulary, optionally grown to VOCAB tokens with joins of two of its tokens (as a
// larger BPE vocabulary has longer merges), masked in the states met along the JSON objects of
// tests/data/json/cases.json. Prints the trie's size, its build time and the time of a mask.
// With SCHEMA_CASES (tests/data/json/schema_cases.json), also a pick's mask along the instances
// of each of its schemas (response_format json_schema; each schema's own cache).
//
// Usage: json_constraint_bench TOKENIZER_DIR CASES_JSON [VOCAB [SCHEMA_CASES]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "nlohmann/json.hpp"
#include "sampling/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Microseconds(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CASES_JSON [VOCAB [SCHEMA_CASES]]\n", argv[0]);
    return 2;
  }
  auto tokenizer = ridge::Tokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> bytes;
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    bytes.push_back((*tokenizer)->IsSpecial(id) ? "" : (*tokenizer)->TokenBytes(id));
  }
  const size_t real = bytes.size();
  const size_t vocab = argc > 3 && std::strtoul(argv[3], nullptr, 10) > 0
                           ? std::strtoul(argv[3], nullptr, 10)
                           : real;
  std::set<std::string> seen(bytes.begin(), bytes.end());
  std::mt19937 rng(1);
  while (bytes.size() < vocab) {
    std::string joined = bytes[rng() % real] + bytes[rng() % real];
    if (joined.size() > 1 && seen.insert(joined).second) bytes.push_back(std::move(joined));
  }

  const auto build_start = Clock::now();
  auto vocabulary = ridge::JsonVocabulary::Create(bytes);
  const double build_ms = Microseconds(Clock::now() - build_start) / 1000.0;
  if (!vocabulary.ok()) {
    std::fprintf(stderr, "%s\n", vocabulary.status().ToString().c_str());
    return 1;
  }

  std::ifstream in(argv[2]);
  const nlohmann::json cases = nlohmann::json::parse(in).at("cases");
  std::vector<double> times;
  std::vector<float> logits(bytes.size(), 0.0f);
  std::vector<uint8_t> allowed;
  for (const auto& c : cases) {
    if (!c.at("object").get<bool>()) continue;
    const std::string text = absl::HexStringToBytes(c.at("text").get<std::string>());
    ridge::JsonByteState state;
    for (size_t i = 0; i < text.size(); ++i) {
      if (i % 4 == 0) {  // what JsonConstraint::MaskLogits does in this state
        const auto start = Clock::now();
        (*vocabulary)->Allowed(state, &allowed);
        for (size_t id = 0; id < logits.size(); ++id) {
          if (allowed[id] == 0) logits[id] = -1e30f;
        }
        times.push_back(Microseconds(Clock::now() - start));
      }
      state.Step(static_cast<uint8_t>(text[i]));
    }
  }
  // As a request meets them: each text's tokens (as the tokenizer encodes it) picked one after
  // another, each pick masked first; the vocabulary's cache of recent states is shared.
  std::vector<double> picks;
  for (const auto& c : cases) {
    if (!c.at("object").get<bool>()) continue;
    const std::string text = absl::HexStringToBytes(c.at("text").get<std::string>());
    auto ids = (*tokenizer)->Encode(text, /*add_special_tokens=*/false);
    if (!ids.ok()) continue;
    ridge::JsonConstraint constraint(*vocabulary, {0});
    for (int32_t id : *ids) {
      const auto start = Clock::now();
      constraint.MaskLogits(logits);
      picks.push_back(Microseconds(Clock::now() - start));
      constraint.Accept(id);
    }
  }
  const auto report = [](const char* what, std::vector<double> t) {
    std::sort(t.begin(), t.end());
    double sum = 0;
    for (double x : t) sum += x;
    std::printf("%s, %zu of them: mean %.0f us, median %.0f us, p99 %.0f us, max %.0f us\n", what,
                t.size(), sum / t.size(), t[t.size() / 2], t[t.size() * 99 / 100], t.back());
  };
  std::printf("vocabulary %zu tokens (%zu from the tokenizer), trie %zu nodes, built in %.1f ms\n",
              bytes.size(), real, (*vocabulary)->trie_nodes(), build_ms);
  report("one walk of the trie (a state not cached), every 4th byte of the JSON texts", times);
  report("one pick's mask as generation meets them (JsonConstraint::MaskLogits, cache shared)",
         picks);
  if (argc <= 4) return 0;
  std::ifstream schema_in(argv[4]);
  const auto schemas = nlohmann::ordered_json::parse(schema_in).at("schemas");
  std::vector<double> schema_picks;
  for (const auto& s : schemas) {
    auto schema = ridge::JsonSchema::Compile(s.at("schema"));
    if (!schema.ok()) {
      std::fprintf(stderr, "%s\n", schema.status().ToString().c_str());
      return 1;
    }
    for (const auto& hex : s.at("valid")) {
      const std::string text = absl::HexStringToBytes(hex.get<std::string>());
      auto ids = (*tokenizer)->Encode(text, /*add_special_tokens=*/false);
      if (!ids.ok()) continue;
      ridge::JsonConstraint constraint(*vocabulary, {0}, *schema);
      for (int32_t id : *ids) {
        const auto start = Clock::now();
        constraint.MaskLogits(logits);
        schema_picks.push_back(Microseconds(Clock::now() - start));
        constraint.Accept(id);
      }
    }
  }
  report("one pick's mask along the schemas' instances (json_schema, a cache per schema)",
         schema_picks);
  return 0;
}
