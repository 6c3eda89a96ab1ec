// JSON-constrained decoding: the byte automaton agrees with Python's json module on every case of
// tests/data/json/cases.json (made by tools/reference/make_json_cases.py); the vocabulary trie's
// mask (walked, and from the cache of recent states) equals stepping every token's bytes one by
// one, in states met along real JSON texts, of any object and of schemas; a constrained sampler
// on random logits always writes one JSON object (parsed by nlohmann::json), of the schema's
// shape when it has one, and then an end token, and nothing else; vocabularies that could stall
// are refused.
#include "sampling/json_constraint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

const std::filesystem::path kData = RIDGE_TEST_DATA_DIR;

struct Case {
  std::string text;
  bool object = false;
};

std::vector<Case> LoadCases() {
  std::ifstream in(kData / "json" / "cases.json");
  const nlohmann::json file = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : file.at("cases")) {
    cases.push_back({absl::HexStringToBytes(c.at("text").get<std::string>()), c.at("object")});
  }
  return cases;
}

// Whether the automaton takes every byte and ends complete.
bool IsObject(const std::string& text) {
  JsonByteState state;
  for (char c : text) {
    if (!state.Step(static_cast<uint8_t>(c))) return false;
  }
  return state.complete();
}

TEST(JsonGrammarTest, AgreesWithPythonsJsonModule) {
  const std::vector<Case> cases = LoadCases();
  ASSERT_GT(cases.size(), 800u);
  int objects = 0;
  for (const Case& c : cases) {
    EXPECT_EQ(IsObject(c.text), c.object) << absl::CEscape(c.text);
    objects += c.object;
  }
  EXPECT_GT(objects, 400);
  EXPECT_LT(objects, static_cast<int>(cases.size()) - 200);
}

// The bytes of every token of a real tokenizer (special tokens none), and `extra` ids past it
// with none, as a model's padded vocabulary has.
std::vector<std::string> TokenBytes(const std::string& tokenizer_name, int extra) {
  auto tokenizer = Tokenizer::Load(kData / "tokenizer" / tokenizer_name);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<std::string> bytes;
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    bytes.push_back((*tokenizer)->IsSpecial(id) ? "" : (*tokenizer)->TokenBytes(id));
  }
  bytes.resize(bytes.size() + extra);
  return bytes;
}

TEST(JsonVocabularyTest, TheTrieMaskIsEveryTokenSteppedAlone) {
  for (const std::string name : {"qwen_style", "mistral_v1"}) {
    SCOPED_TRACE(name);
    const std::vector<std::string> bytes = TokenBytes(name, 13);
    auto vocabulary = JsonVocabulary::Create(bytes);
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
    std::vector<uint8_t> allowed;
    int compared = 0, strictly_between = 0;
    const std::vector<Case> cases = LoadCases();
    for (size_t k = 0; k < cases.size() && compared < 400; k += 7) {
      if (!cases[k].object) continue;
      JsonByteState state;
      for (size_t i = 0; i < cases[k].text.size(); ++i) {
        if (i % 5 == 0) {
          (*vocabulary)->Allowed(state, &allowed);
          // The cached bits (keyed by the state without what its mode does not read; more
          // states than the cache holds pass through it) are the same.
          const auto bits = (*vocabulary)->AllowedBits(state);
          for (size_t id = 0; id < allowed.size(); ++id) {
            ASSERT_EQ(((*bits)[id / 64] >> (id % 64)) & 1u, allowed[id]) << "token " << id;
          }
          int count = 0;
          for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id) {
            JsonByteState s = state;
            bool fits = !bytes[id].empty();
            for (size_t b = 0; fits && b < bytes[id].size(); ++b) {
              fits = s.Step(static_cast<uint8_t>(bytes[id][b]));
            }
            ASSERT_EQ(allowed[id] != 0, fits)
                << "token " << id << " after " << absl::CEscape(cases[k].text.substr(0, i));
            count += fits;
          }
          ++compared;
          strictly_between += count > 0 && count < static_cast<int>(bytes.size()) - 13;
        }
        ASSERT_TRUE(state.Step(static_cast<uint8_t>(cases[k].text[i])));
      }
    }
    EXPECT_GE(compared, 200);
    EXPECT_GE(strictly_between, compared / 2);  // states that allow some tokens and refuse others
  }
}

// The same for schema states, along the instances of tests/data/json/schema_cases.json: the
// masks from the cache (per schema; a string's body from the set known in advance) equal the
// whole trie's walk, which equals stepping each token alone.
TEST(JsonVocabularyTest, TheSchemaMaskIsEveryTokenSteppedAlone) {
  std::ifstream in(kData / "json" / "schema_cases.json");
  const auto file = nlohmann::ordered_json::parse(in);
  for (const std::string name : {"qwen_style", "mistral_v1"}) {
    SCOPED_TRACE(name);
    const std::vector<std::string> bytes = TokenBytes(name, 13);
    auto vocabulary = JsonVocabulary::Create(bytes);
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
    std::vector<uint8_t> allowed;
    int compared = 0, strictly_between = 0;
    for (const auto& c : file.at("schemas")) {
      auto schema = JsonSchema::Compile(c.at("schema"));
      ASSERT_TRUE(schema.ok()) << schema.status();
      for (size_t k = 0; k < c.at("valid").size(); k += 5) {
        const std::string text = absl::HexStringToBytes(c.at("valid")[k].get<std::string>());
        JsonSchemaState state(schema->get());
        for (size_t i = 0; i < text.size(); ++i) {
          if (i % 3 == 0) {
            (*vocabulary)->Allowed(state, &allowed);
            const auto bits = (*schema)->AllowedBits(**vocabulary, state);
            int count = 0;
            for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id) {
              ASSERT_EQ(((*bits)[id / 64] >> (id % 64)) & 1u, allowed[id]) << "token " << id;
              JsonSchemaState s = state;
              bool fits = !bytes[id].empty();
              for (size_t b = 0; fits && b < bytes[id].size(); ++b) {
                fits = s.Step(static_cast<uint8_t>(bytes[id][b]));
              }
              ASSERT_EQ(allowed[id] != 0, fits)
                  << "token " << id << " after " << absl::CEscape(text.substr(0, i));
              count += fits;
            }
            ++compared;
            strictly_between += count > 0 && count < static_cast<int>(bytes.size()) - 13;
          }
          ASSERT_TRUE(state.Step(static_cast<uint8_t>(text[i])));
        }
      }
    }
    EXPECT_GE(compared, 300);
    EXPECT_GE(strictly_between, compared * 9 / 10);
  }
}

TEST(JsonVocabularyTest, RefusesVocabulariesThatCouldStall) {
  std::vector<std::string> bytes;
  for (int c = 0x20; c < 0x7F; ++c) bytes.push_back(std::string(1, static_cast<char>(c)));
  EXPECT_TRUE(JsonVocabulary::Create(bytes).ok());
  std::vector<std::string> no_brace = bytes;
  no_brace['}' - 0x20] = "}}";
  const auto refused = JsonVocabulary::Create(no_brace);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'}'"), std::string::npos) << refused.status();
  // A token that ends inside a character needs the continuation bytes alone.
  std::vector<std::string> split = bytes;
  split.push_back("\xC3");
  const auto split_refused = JsonVocabulary::Create(split);
  ASSERT_FALSE(split_refused.ok());
  EXPECT_NE(split_refused.status().message().find("0x80"), std::string::npos);
  for (int c = 0x80; c < 0xC0; ++c) split.push_back(std::string(1, static_cast<char>(c)));
  EXPECT_TRUE(JsonVocabulary::Create(split).ok());
  EXPECT_TRUE(JsonVocabulary::Create({bytes.data(), 1}).status().message().find("'!'") !=
              std::string::npos);
}

// What a random model writes through `sampler` in at most 4000 tokens of `bytes`: the text
// before the end token `end`, and whether `end` came. Its logits are random (from `seed`), a
// little in favour of the tokens that end strings and containers so that the outputs end within
// the steps given, and highest at `end` all along (a constrained sampler refuses it until the
// output is complete).
struct RandomOutput {
  std::string text;
  bool ended = false;
};

RandomOutput WriteRandomly(Sampler& sampler, const std::vector<std::string>& bytes, int32_t end,
                           uint64_t seed) {
  const auto vocab = static_cast<int32_t>(bytes.size());
  std::vector<float> favour(vocab, 0.0f);
  for (int32_t id = 0; id < vocab; ++id) {
    if (bytes[id].find_first_of("\"}]") != std::string::npos) favour[id] = 4.0f;
  }
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  RandomOutput out;
  for (int step = 0; step < 4000 && !out.ended; ++step) {
    for (int32_t id = 0; id < vocab; ++id) logits[id] = normal(rng) + favour[id];
    logits[end] = 50.0f;
    const int32_t token = sampler.Sample(logits, {}, {});
    if (token == end) {
      out.ended = true;
    } else {
      out.text += bytes[token];
    }
  }
  return out;
}

// min_tokens would hold off the end token the completed object needs: refused.
TEST(JsonSamplerTest, MinTokensIsRefused) {
  const std::vector<std::string> bytes = TokenBytes("qwen_style", 13);
  auto vocabulary = JsonVocabulary::Create(bytes);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  SamplingParams params;
  params.json_output = *vocabulary;
  params.min_tokens = 1;
  const auto sampler =
      Sampler::Create(params, static_cast<int32_t>(bytes.size()),
                      std::vector<int32_t>{static_cast<int32_t>(bytes.size()) - 1});
  EXPECT_NE(sampler.status().message().find("min_tokens cannot be combined with a JSON constraint"),
            std::string::npos)
      << sampler.status();
}

// Every output of a random model is one JSON object and then the end token.
TEST(JsonSamplerTest, ARandomModelWritesOneJsonObjectThenEnds) {
  const std::vector<std::string> bytes = TokenBytes("qwen_style", 13);
  auto vocabulary = JsonVocabulary::Create(bytes);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  const auto vocab = static_cast<int32_t>(bytes.size());
  const int32_t end = vocab - 1;  // a special token past the text's: no bytes of its own
  int finished = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    SamplingParams params;
    params.temperature = seed % 3 == 0 ? 0.0f : 1.0f;  // greedy on fresh random logits too
    params.seed = seed;
    params.json_output = *vocabulary;
    auto sampler = Sampler::Create(params, vocab, std::vector<int32_t>{end});
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    const auto [text, ended] = WriteRandomly(*sampler, bytes, end, seed);
    if (!ended) {  // still within an object: what there is can become one
      EXPECT_FALSE(sampler->json_constraint()->complete());
      continue;
    }
    ++finished;
    SCOPED_TRACE(text);
    const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(parsed.is_discarded());
    EXPECT_TRUE(parsed.is_object());
    EXPECT_TRUE(IsObject(text));
  }
  EXPECT_GE(finished, 18);
}

// A schema's shape, checked directly on the parsed output (not by a schema validator): keys in the
// schema's order, the required ones there, each value of its type, enum values from the list,
// array lengths within the bounds.
constexpr const char* kShapeSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", 7, null]},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/pet"}]},
    "ok": {"type": "boolean"},
    "score": {"type": ["number", "null"]}
  },
  "required": ["name", "mood", "tags", "pet"],
  "additionalProperties": false,
  "$defs": {"pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]},
                                                      "legs": {"type": "integer"}},
                    "required": ["kind", "legs"], "additionalProperties": false}}
})";

void ExpectTheShape(const nlohmann::ordered_json& v) {
  ASSERT_TRUE(v.is_object());
  const std::vector<std::string> order = {"name", "age", "mood", "tags", "pet", "ok", "score"};
  size_t at = 0;
  for (const auto& [key, unused] : v.items()) {
    while (at < order.size() && order[at] != key) ++at;
    ASSERT_LT(at, order.size()) << "key " << key << " unknown or out of order";
  }
  for (const char* key : {"name", "mood", "tags", "pet"}) ASSERT_TRUE(v.contains(key)) << key;
  EXPECT_TRUE(v.at("name").is_string());
  if (v.contains("age")) {
    EXPECT_TRUE(v.at("age").is_number_integer());
  }
  const auto& mood = v.at("mood");
  EXPECT_TRUE(mood == "happy" || mood == "sad" || mood == 7 || mood.is_null()) << mood;
  const auto& tags = v.at("tags");
  ASSERT_TRUE(tags.is_array());
  EXPECT_GE(tags.size(), 1u);
  EXPECT_LE(tags.size(), 3u);
  for (const auto& t : tags) EXPECT_TRUE(t.is_string());
  const auto& pet = v.at("pet");
  if (!pet.is_null()) {
    ASSERT_TRUE(pet.is_object());
    ASSERT_EQ(pet.size(), 2u);
    EXPECT_TRUE(pet.at("kind") == "cat" || pet.at("kind") == "dog");
    EXPECT_TRUE(pet.at("legs").is_number_integer());
  }
  if (v.contains("ok")) {
    EXPECT_TRUE(v.at("ok").is_boolean());
  }
  if (v.contains("score")) {
    EXPECT_TRUE(v.at("score").is_number() || v.at("score").is_null());
  }
}

// A random model (WriteRandomly) on two real vocabularies: every finished output parses and has
// the schema's shape.
TEST(JsonSamplerTest, ARandomModelWritesTheSchemasShape) {
  const auto schema = JsonSchema::Parse(kShapeSchema);
  ASSERT_TRUE(schema.ok()) << schema.status();
  int finished = 0, pets = 0;
  for (const std::string name : {"qwen_style", "mistral_v1"}) {
    SCOPED_TRACE(name);
    const std::vector<std::string> bytes = TokenBytes(name, 13);
    auto vocabulary = JsonVocabulary::Create(bytes);
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
    const auto vocab = static_cast<int32_t>(bytes.size());
    const int32_t end = vocab - 1;
    for (uint64_t seed = 0; seed < 16; ++seed) {
      SamplingParams params;
      params.temperature = seed % 4 == 0 ? 0.0f : 1.0f;
      params.seed = seed;
      params.json_output = *vocabulary;
      params.json_schema = *schema;
      auto sampler = Sampler::Create(params, vocab, std::vector<int32_t>{end});
      ASSERT_TRUE(sampler.ok()) << sampler.status();
      const auto [text, ended] = WriteRandomly(*sampler, bytes, end, seed);
      if (!ended) continue;
      ++finished;
      SCOPED_TRACE(text);
      const auto parsed = nlohmann::ordered_json::parse(text, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << absl::CEscape(text);
      ExpectTheShape(parsed);
      pets += parsed.at("pet").is_object();
    }
  }
  EXPECT_GE(finished, 24);
  EXPECT_GE(pets, 1);  // both alternatives of the anyOf are met
  EXPECT_LT(pets, finished);
}

// An output that continues a given start of the object (json_prefix, a chat's final message
// continued): the start and the output together are one instance; a start no instance begins
// with is refused, naming the first byte that does not fit; a whole object as the start leaves
// only the end.
TEST(JsonSamplerTest, AnOutputCompletesTheGivenStart) {
  const auto schema = JsonSchema::Parse(kShapeSchema);
  ASSERT_TRUE(schema.ok()) << schema.status();
  const std::vector<std::string> bytes = TokenBytes("qwen_style", 13);
  auto vocabulary = JsonVocabulary::Create(bytes);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  const auto vocab = static_cast<int32_t>(bytes.size());
  const int32_t end = vocab - 1;
  int finished = 0, named = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.seed = seed;
    params.json_output = *vocabulary;
    const bool with_schema = seed % 2 == 0;
    if (with_schema) params.json_schema = *schema;
    params.json_prefix = with_schema ? R"({"name": "Al)" : R"({"list": [1, )";
    auto sampler = Sampler::Create(params, vocab, std::vector<int32_t>{end});
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    const auto [text, ended] = WriteRandomly(*sampler, bytes, end, seed);
    if (!ended) continue;
    ++finished;
    const std::string whole = params.json_prefix + text;
    SCOPED_TRACE(whole);
    const auto parsed = nlohmann::ordered_json::parse(whole, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded());
    if (with_schema) {
      ExpectTheShape(parsed);
      named += parsed.at("name").get<std::string>().starts_with("Al");
    } else {
      EXPECT_TRUE(parsed.at("list").is_array());
      EXPECT_EQ(parsed.at("list").at(0), 1);
    }
    // The output alone is not an instance: it goes on from the start.
    EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_discarded());
  }
  EXPECT_GE(finished, 10);
  EXPECT_EQ(named, finished - finished / 2) << "every schema output keeps the name's start";

  SamplingParams params;
  params.json_output = *vocabulary;
  params.json_schema = *schema;
  for (const auto& [prefix, fitting] : std::vector<std::pair<std::string, int>>{
           {"[", 0}, {R"({"age": 4)", 2}, {R"({"name": 3)", 9}}) {
    EXPECT_EQ(JsonStartFitting(schema->get(), prefix), fitting) << prefix;
    params.json_prefix = prefix;
    const auto refused = Sampler::Create(params, vocab, std::vector<int32_t>{end});
    ASSERT_FALSE(refused.ok()) << prefix;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(refused.status().message(), "JSON output: ")) << refused.status();
    EXPECT_NE(refused.status().message().find(absl::StrCat("its first ", fitting, " bytes")),
              std::string::npos)
        << refused.status();
  }
  // A whole object as the start: only the end may follow.
  EXPECT_EQ(JsonStartFitting(nullptr, R"({"a": [1]} )"), 10u);  // nothing after the object
  EXPECT_EQ(JsonStartFitting(nullptr, R"({"a": [1)"), 8u);
  params.json_schema = nullptr;
  params.json_prefix = R"({"done": true})";
  auto done = Sampler::Create(params, vocab, std::vector<int32_t>{end});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->json_constraint()->complete());
  std::vector<float> logits(vocab, 0.0f);
  logits[0] = 100.0f;
  EXPECT_EQ(done->Sample(logits, {}, {}), end);
  // A start without a constraint is refused by ValidateSamplingParams.
  SamplingParams bare;
  bare.json_prefix = "{";
  EXPECT_FALSE(Sampler::Create(bare, vocab, std::vector<int32_t>{end}).ok());
}

TEST(JsonSamplerTest, OnlyAnEndTokenFollowsTheObjectAndNoneComesBefore) {
  std::vector<std::string> bytes;
  for (int c = 0x20; c < 0x7F; ++c) bytes.push_back(std::string(1, static_cast<char>(c)));
  bytes.push_back("{}");
  bytes.push_back("");  // the end-of-sequence token
  const auto vocab = static_cast<int32_t>(bytes.size());
  SamplingParams params;
  params.temperature = 0.0f;
  params.json_output = *JsonVocabulary::Create(bytes);
  EXPECT_FALSE(Sampler::Create(params, vocab).ok());  // nothing could end it
  params.stop_token_ids = {'A' - 0x20};  // a stop token that is text: only after the object
  auto sampler = Sampler::Create(params, vocab, std::vector<int32_t>{vocab - 1, 'A' - 0x20});
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  EXPECT_FALSE(sampler->IsPlainArgmax(0));
  EXPECT_TRUE(sampler->NeedsHostLogits(0));
  std::vector<float> logits(vocab, 0.0f);
  logits[vocab - 1] = 10.0f;  // the end, wanted first
  logits['A' - 0x20] = 9.0f;
  logits[vocab - 2] = 1.0f;  // "{}"
  EXPECT_EQ(sampler->Sample(logits, {}, {}), vocab - 2);
  EXPECT_TRUE(sampler->json_constraint()->complete());
  EXPECT_EQ(sampler->Sample(logits, {}, {}), vocab - 1);
  logits[vocab - 1] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(sampler->Sample(logits, {}, {}), 'A' - 0x20);
  // Every allowed logit -inf: the lowest allowed token, never a refused one.
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  auto fresh = Sampler::Create(params, vocab, std::vector<int32_t>{vocab - 1});
  EXPECT_EQ(fresh->Sample(logits, {}, {}), ' ' - 0x20);
  // Stop tokens that take every token that could go on (here ' ', '{' and "{}", all a JSON object
  // can start with) end the output at once with an end token, rather than leave no token at all.
  SamplingParams blocked = params;
  blocked.stop_token_ids = {' ' - 0x20, '{' - 0x20, vocab - 2};
  auto stalled = Sampler::Create(
      blocked, vocab, std::vector<int32_t>{vocab - 1, ' ' - 0x20, '{' - 0x20, vocab - 2});
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  std::fill(logits.begin(), logits.end(), 0.0f);
  EXPECT_EQ(stalled->Sample(logits, {}, {}), ' ' - 0x20);  // the lowest end token, logits tied
  logits[vocab - 1] = 1.0f;
  EXPECT_EQ(stalled->Sample(logits, {}, {}), vocab - 1);
  EXPECT_FALSE(stalled->json_constraint()->complete());
  // A vocabulary of another size is refused by name.
  EXPECT_NE(Sampler::Create(params, vocab + 1, std::vector<int32_t>{0})
                .status()
                .message()
                .find("JSON output"),
            std::string::npos);
}

// A reasoning model's output may open with its reasoning ("<think>" ... "</think>", special
// tokens without bytes), free of the constraint, and the object follows it; without the
// reasoning tokens, or once the object has begun, "<think>" is refused like any special token.
TEST(JsonSamplerTest, AReasoningModelMayThinkBeforeTheObject) {
  std::vector<std::string> bytes;
  for (int c = 0x20; c < 0x7F; ++c) bytes.push_back(std::string(1, static_cast<char>(c)));
  bytes.push_back("{}");
  const auto text_tokens = static_cast<int32_t>(bytes.size());
  const int32_t open = text_tokens, close = text_tokens + 1, end = text_tokens + 2;
  bytes.insert(bytes.end(), {"", "", ""});
  const auto vocab = static_cast<int32_t>(bytes.size());
  const auto token = [](char c) { return static_cast<int32_t>(c - 0x20); };
  SamplingParams params;
  params.temperature = 0.0f;
  params.json_output = *JsonVocabulary::Create(bytes);
  params.json_reasoning_open = open;
  params.json_reasoning_close = close;
  auto sampler = Sampler::Create(params, vocab, std::vector<int32_t>{end});
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const JsonConstraint& json = *sampler->json_constraint();
  // Wanted most: `first`, then `second`; the rest even.
  const auto want = [&](int32_t first, int32_t second) {
    std::vector<float> logits(vocab, 0.0f);
    logits[first] = 10.0f;
    logits[second] = 5.0f;
    return sampler->Sample(logits, {}, {});
  };
  EXPECT_EQ(want(open, token('{')), open);  // reasoning may open the output
  EXPECT_TRUE(json.reasoning());
  EXPECT_FALSE(json.complete());
  EXPECT_EQ(want(token('x'), token('{')), token('x'));  // any text while it reasons
  EXPECT_EQ(want(open, token('{')), open);              // its tags are text to it too
  EXPECT_EQ(want(close, token('x')), close);
  EXPECT_FALSE(json.reasoning());
  EXPECT_EQ(want(token('x'), token('{')), token('{'));  // then the object, constrained
  EXPECT_EQ(want(open, token('}')), token('}'));        // no reasoning inside it
  EXPECT_TRUE(json.complete());
  EXPECT_EQ(want(token('x'), end), end);

  // The end token may come while reasoning (the output then ends short of an object).
  auto thinking = Sampler::Create(params, vocab, std::vector<int32_t>{end});
  std::vector<float> logits(vocab, 0.0f);
  logits[open] = 10.0f;
  EXPECT_EQ(thinking->Sample(logits, {}, {}), open);
  logits[open] = 0.0f;
  logits[end] = 10.0f;
  EXPECT_EQ(thinking->Sample(logits, {}, {}), end);
  EXPECT_FALSE(thinking->json_constraint()->complete());

  // An object from the first token leaves no reasoning after it.
  auto direct = Sampler::Create(params, vocab, std::vector<int32_t>{end});
  logits.assign(vocab, 0.0f);
  logits[token('{')] = 10.0f;
  EXPECT_EQ(direct->Sample(logits, {}, {}), token('{'));
  logits[open] = 20.0f;
  EXPECT_NE(direct->Sample(logits, {}, {}), open);
  EXPECT_FALSE(direct->json_constraint()->reasoning());

  // Without the reasoning tokens "<think>" is refused from the start.
  SamplingParams plain = params;
  plain.json_reasoning_open = plain.json_reasoning_close = -1;
  auto strict = Sampler::Create(plain, vocab, std::vector<int32_t>{end});
  logits.assign(vocab, 0.0f);
  logits[open] = 20.0f;
  logits[token('{')] = 1.0f;
  EXPECT_EQ(strict->Sample(logits, {}, {}), token('{'));

  // Reasoning tokens that cannot work are refused by name.
  const auto refusal = [&](SamplingParams bad) {
    const auto made = Sampler::Create(bad, vocab, std::vector<int32_t>{end});
    return made.ok() ? std::string("accepted") : std::string(made.status().message());
  };
  SamplingParams same = params;
  same.json_reasoning_close = open;
  EXPECT_NE(refusal(same).find("the same token"), std::string::npos);
  SamplingParams outside = params;
  outside.json_reasoning_close = vocab;
  EXPECT_NE(refusal(outside).find("close token"), std::string::npos);
  SamplingParams begun = params;
  begun.json_prefix = "{";
  EXPECT_NE(refusal(begun).find("already begun"), std::string::npos);
  SamplingParams unconstrained = params;
  unconstrained.json_output = nullptr;
  EXPECT_NE(refusal(unconstrained).find("without a constraint"), std::string::npos);
}

}  // namespace
}  // namespace ridge
