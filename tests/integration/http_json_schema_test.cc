// response_format json_schema end to end on the real binary: every choice that ends (finish_reason
// "stop") parses and has the schema's shape, checked field by field here (keys in the schema's
// order, each value's type, the enum); chat and completions, unary and streamed. The same
// requests without the constraint have no such output. An anyOf of objects gives one of them,
// whole. A named tool_choice gives that function's arguments, of its parameters' shape; tool_choice
// "required" a list of calls. A final message continued (continue_final_message) is completed
// to the schema's shape. A schema keyword not implemented is a 400 naming it. (The random
// model spends many tokens on whitespace between tokens, up to the 48 bytes a run may have, and the
// tiny tokenizer writes one byte a token: hence 1000 tokens.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>

#include "tests/integration/http_choices.h"
#include "tests/integration/server_process.h"
#include "tests/server/tiny_tokenizer.h"

namespace ridge {
namespace {

using nlohmann::json;

// Its properties in alphabetical order: the test client's nlohmann::json sends keys sorted.
const char* const kSchema = R"({
  "type": "object",
  "properties": {
    "age": {"type": "integer"},
    "name": {"type": "string"},
    "pet": {"enum": ["cat", "dog"]},
    "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
  },
  "required": ["age", "name", "pet", "tags"],
  "additionalProperties": false
})";

// Whether `text` is an instance of kSchema as the constraint writes it.
bool HasTheShape(const std::string& text) {
  const auto v = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object() || v.size() != 4) return false;
  const std::vector<std::string> keys = {"age", "name", "pet", "tags"};
  size_t k = 0;
  for (const auto& [key, unused] : v.items()) {
    if (key != keys[k++]) return false;
  }
  if (!v.at("name").is_string() || !v.at("age").is_number_integer()) return false;
  if (v.at("pet") != "cat" && v.at("pet") != "dog") return false;
  const auto& tags = v.at("tags");
  if (!tags.is_array() || tags.size() > 3) return false;
  for (const auto& t : tags) {
    if (!t.is_boolean()) return false;
  }
  return true;
}

// Two kinds of pet, told apart by the value of "kind", which both write first.
const char* const kPetSchema = R"({
  "type": "object",
  "properties": {"pet": {"anyOf": [
    {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
     "required": ["kind", "lives"], "additionalProperties": false},
    {"type": "object", "properties": {"kind": {"const": "dog"}, "wags": {"type": "boolean"}},
     "required": ["kind", "wags"], "additionalProperties": false}]}},
  "required": ["pet"],
  "additionalProperties": false
})";

// What `text` is as an instance of kPetSchema written as the constraint writes it: "cat",
// "dog", or "" when it is not one.
std::string PetKind(const std::string& text) {
  const auto v = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object() || v.size() != 1 || !v.contains("pet") || !v.at("pet").is_object()) return "";
  const auto& pet = v.at("pet");
  std::vector<std::string> keys;
  for (const auto& [key, unused] : pet.items()) keys.push_back(key);
  if (keys == std::vector<std::string>{"kind", "lives"} && pet.at("kind") == "cat" &&
      pet.at("lives").is_number_integer()) {
    return "cat";
  }
  if (keys == std::vector<std::string>{"kind", "wags"} && pet.at("kind") == "dog" &&
      pet.at("wags").is_boolean()) {
    return "dog";
  }
  return "";
}

class HttpJsonSchemaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           ("ridge_http_schema_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    testing::WriteTinyTokenizer(dir_ / "tokenizer");
    const auto model = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "mesanet" / "d64_untied";
    signal(SIGPIPE, SIG_IGN);
    std::string error;
    server_ = testing::ServerProcess::Start(RIDGESERVE_BINARY,
                                            {"--model", model.string(), "--tokenizer",
                                             (dir_ / "tokenizer").string(), "--threads", "1"},
                                            dir_ / "server.log", &error)
                  .release();
    ASSERT_NE(server_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(60, 0);
  }

  // Constrained to `schema` unless it is null.
  static json Body(const std::string& path, bool stream, const char* schema) {
    json body = {
        {"max_tokens", 1000}, {"temperature", 1.0}, {"seed", 11}, {"n", 4}, {"stream", stream}};
    if (schema != nullptr) {
      body["response_format"] = {
          {"type", "json_schema"},
          {"json_schema", {{"name", "shape"}, {"strict", true}, {"schema", json::parse(schema)}}}};
    }
    if (path == "/v1/completions") {
      body["prompt"] = "A person as JSON:";
    } else {
      body["messages"] = {{{"role", "user"}, {"content", "Describe a person in JSON."}}};
    }
    return body;
  }

  static inline std::filesystem::path dir_;
  static inline testing::ServerProcess* server_ = nullptr;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpJsonSchemaTest, EveryFinishedChoiceHasTheSchemasShape) {
  for (const bool stream : {false, true}) {
    for (const std::string path : {"/v1/chat/completions", "/v1/completions"}) {
      SCOPED_TRACE(path + (stream ? " streamed" : ""));
      const auto free = testing::PostForChoices(*client_, path, Body(path, stream, nullptr));
      ASSERT_EQ(free.status, 200) << free.raw;
      for (const auto& [i, text] : free.texts) EXPECT_FALSE(HasTheShape(text)) << text;

      const auto [status, raw, texts, finish] =
          testing::PostForChoices(*client_, path, Body(path, stream, kSchema));
      ASSERT_EQ(status, 200) << raw;
      ASSERT_EQ(finish.size(), 4u);
      int instances = 0;
      for (const auto& [i, reason] : finish) {
        if (reason != "stop") continue;
        EXPECT_TRUE(HasTheShape(texts.at(i))) << texts.at(i);
        ++instances;
      }
      EXPECT_GE(instances, 2);
    }
  }
}

// The choice between the objects is the discriminator's value: a logit bias on its first byte
// ('c' or 'd', tokens 3 + the byte) picks the kind, and what follows is that kind's.
TEST_F(HttpJsonSchemaTest, AnAnyOfOfObjectsGivesOneOfThemWhole) {
  for (const std::string kind : {"cat", "dog"}) {
    for (const std::string path : {"/v1/chat/completions", "/v1/completions"}) {
      SCOPED_TRACE(path + " " + kind);
      json body = Body(path, false, kPetSchema);
      body["logit_bias"] = {{std::to_string(3 + kind[0]), 100}};
      const auto [status, raw, texts, finish] = testing::PostForChoices(*client_, path, body);
      ASSERT_EQ(status, 200) << raw;
      ASSERT_EQ(finish.size(), 4u);
      int instances = 0;
      for (const auto& [i, reason] : finish) {
        if (reason != "stop") continue;
        EXPECT_EQ(PetKind(texts.at(i)), kind) << texts.at(i);
        ++instances;
      }
      EXPECT_GE(instances, 2);
    }
  }
}

// A named tool_choice constrains the output to its function's parameters: every finished choice
// is one call to it whose arguments have the schema's shape (unary, and streamed in pieces that
// join to it).
TEST_F(HttpJsonSchemaTest, ANamedToolChoiceWritesTheFunctionsArguments) {
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "unary");
    json body = Body("/v1/chat/completions", stream, nullptr);
    body["tools"] = {{{"type", "function"},
                      {"function", {{"name", "record"}, {"parameters", json::parse(kSchema)}}}}};
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "record"}}}};
    std::map<int, json> calls;  // by choice: its tool calls
    std::map<int, std::string> finish;
    if (stream) {
      const auto s = testing::PostStream(*client_, "/v1/chat/completions", body);
      ASSERT_EQ(s.status, 200) << s.raw;
      for (const json& chunk : s.chunks) {
        for (const json& c : chunk.value("choices", json::array())) {
          const json delta = c.value("delta", json::object());
          // A call streams in pieces: the first names it, later ones add to its arguments.
          for (const json& piece : delta.value("tool_calls", json::array())) {
            json& list = calls[c.at("index")];
            if (piece.contains("id")) {
              list.push_back(piece);
              continue;
            }
            ASSERT_FALSE(list.empty()) << "arguments before their call was opened: " << piece;
            json& call = list.back();
            ASSERT_EQ(call["index"], piece["index"]);
            call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() +
                                            piece["function"]["arguments"].get<std::string>();
          }
          if (c.value("finish_reason", json()).is_string())
            finish[c.at("index")] = c["finish_reason"];
        }
      }
    } else {
      const auto r = testing::PostJson(*client_, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      for (const json& c : r.body.at("choices")) {
        EXPECT_TRUE(c["message"]["content"].is_null()) << c;
        calls[c.at("index")] = c["message"].value("tool_calls", json::array());
        finish[c.at("index")] = c.at("finish_reason");
      }
    }
    ASSERT_EQ(finish.size(), 4u);
    int instances = 0;
    for (const auto& [i, reason] : finish) {
      ASSERT_EQ(calls[i].size(), 1u) << calls[i];
      EXPECT_EQ(calls[i][0]["function"]["name"], "record");
      if (reason != "stop") continue;
      const std::string arguments = calls[i][0]["function"]["arguments"];
      EXPECT_TRUE(HasTheShape(arguments)) << arguments;
      ++instances;
    }
    EXPECT_GE(instances, 2);
  }
}

// tool_choice "required": every finished choice is a list of calls to the tools, each with its
// own function's arguments. A logit bias on the first byte of a name ('r' or 'p', tokens 3 + the
// byte; no string in the arguments where it would run on) picks the function.
TEST_F(HttpJsonSchemaTest, RequiredToolChoiceWritesCallsOfTheTools) {
  const json record = json::parse(R"({"type": "object", "properties": {"age": {"type": "integer"},
      "pet": {"enum": ["cat", "dog"]}}, "required": ["age", "pet"]})");
  for (const std::string name : {"record", "ping"}) {
    SCOPED_TRACE(name);
    json body = Body("/v1/chat/completions", false, nullptr);
    body["tools"] = {
        {{"type", "function"}, {"function", {{"name", "record"}, {"parameters", record}}}},
        {{"type", "function"}, {"function", {{"name", "ping"}}}}};
    body["tool_choice"] = "required";
    body["logit_bias"] = {{std::to_string(3 + name[0]), 100}};
    const auto r = testing::PostJson(*client_, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    int finished = 0;
    for (const json& c : r.body.at("choices")) {
      if (c["finish_reason"] != "tool_calls") {
        EXPECT_EQ(c["finish_reason"], "length") << c;
        continue;
      }
      ++finished;
      EXPECT_TRUE(c["message"]["content"].is_null()) << c;
      ASSERT_GE(c["message"]["tool_calls"].size(), 1u) << c;
      for (const json& call : c["message"]["tool_calls"]) {
        EXPECT_EQ(call["function"]["name"], name);
        const auto arguments = json::parse(call["function"]["arguments"].get<std::string>());
        if (name == "ping") {
          EXPECT_EQ(arguments, json::object());
        } else {
          EXPECT_EQ(arguments.size(), 2u) << arguments;
          EXPECT_TRUE(arguments["age"].is_number_integer()) << arguments;
          EXPECT_TRUE(arguments["pet"] == "cat" || arguments["pet"] == "dog") << arguments;
        }
      }
    }
    EXPECT_GE(finished, 2);
  }
}

// continue_final_message: the output goes on from the final message's text, and the two together
// have the schema's shape (unary and streamed). A final message no instance begins with, or one
// with text where tool_choice constrains a call from its start, is a 400 naming the field.
TEST_F(HttpJsonSchemaTest, AContinuedFinalMessageIsCompletedToTheSchemasShape) {
  const std::string start = R"({"age": 4)";
  auto continuing = [&](bool stream, const std::string& final_text) {
    json body = Body("/v1/chat/completions", stream, kSchema);
    body["messages"].push_back({{"role", "assistant"}, {"content", final_text}});
    body["add_generation_prompt"] = false;
    body["continue_final_message"] = true;
    return body;
  };
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "unary");
    const auto [status, raw, texts, finish] =
        testing::PostForChoices(*client_, "/v1/chat/completions", continuing(stream, start));
    ASSERT_EQ(status, 200) << raw;
    ASSERT_EQ(finish.size(), 4u);
    int instances = 0;
    for (const auto& [i, reason] : finish) {
      if (reason != "stop") continue;
      const std::string whole = start + texts.at(i);
      EXPECT_TRUE(HasTheShape(whole)) << whole;
      EXPECT_TRUE(std::to_string(json::parse(whole).value("age", 0)).starts_with("4")) << whole;
      ++instances;
    }
    EXPECT_GE(instances, 2);
  }

  const auto wrong =
      testing::PostJson(*client_, "/v1/chat/completions", continuing(false, R"({"name": "x")"));
  ASSERT_EQ(wrong.status, 400) << wrong.body;
  EXPECT_EQ(wrong.body["error"]["param"], "continue_final_message");
  EXPECT_NE(wrong.body["error"]["message"].get<std::string>().find(
                "its first 2 bytes could begin one, not the byte after them, 'n'"),
            std::string::npos)
      << wrong.body;

  json call = continuing(false, start);
  call.erase("response_format");
  call["tools"] = {{{"type", "function"},
                    {"function", {{"name", "record"}, {"parameters", json::parse(kSchema)}}}}};
  call["tool_choice"] = {{"type", "function"}, {"function", {{"name", "record"}}}};
  const auto refused = testing::PostJson(*client_, "/v1/chat/completions", call);
  ASSERT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.body["error"]["param"], "continue_final_message");
  call["messages"].back()["content"] = "";  // no text: the call starts with the output
  const auto empty = testing::PostJson(*client_, "/v1/chat/completions", call);
  ASSERT_EQ(empty.status, 200) << empty.body;
}

TEST_F(HttpJsonSchemaTest, AKeywordNotImplementedIsRefusedByName) {
  json body = Body("/v1/completions", false, kSchema);
  body["response_format"]["json_schema"]["schema"]["properties"]["age"]["minimum"] = 0;
  const auto r = testing::PostJson(*client_, "/v1/completions", body);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "response_format.json_schema.schema");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find(
                "at #/properties/age: keyword \"minimum\" is not supported"),
            std::string::npos)
      << r.body;
}

}  // namespace
}  // namespace ridge
