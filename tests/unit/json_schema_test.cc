// Schema-constrained decoding (sampling/json_schema.h): the automaton agrees with the jsonschema
// package on every case of tests/data/json/schema_cases.json (made by
// tools/reference/make_json_schema_cases.py): each instance taken whole, every prefix of it
// viable, each non-instance refused at some byte or at its end; the compiler refuses what it
// does not implement, naming the keyword and where.
#include "sampling/json_schema.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "sampling/sampler.h"

namespace ridge {
namespace {

const std::filesystem::path kData = RIDGE_TEST_DATA_DIR;
using ojson = nlohmann::ordered_json;

// How far `text` gets: the bytes taken before one is refused, and whether it ends complete.
struct Progress {
  size_t taken = 0;
  bool complete = false;
};

Progress Feed(const JsonSchema& schema, const std::string& text) {
  JsonSchemaState state(&schema);
  Progress run;
  for (char c : text) {
    if (!state.Step(static_cast<uint8_t>(c))) return run;
    ++run.taken;
  }
  run.complete = state.complete();
  return run;
}

TEST(JsonSchemaTest, AgreesWithTheJsonschemaPackage) {
  std::ifstream in(kData / "json" / "schema_cases.json");
  const ojson file = ojson::parse(in);
  int valid = 0, invalid = 0, refused_early = 0;
  for (const ojson& c : file.at("schemas")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    auto schema = JsonSchema::Compile(c.at("schema"));
    ASSERT_TRUE(schema.ok()) << schema.status();
    for (const ojson& hex : c.at("valid")) {
      const std::string text = absl::HexStringToBytes(hex.get<std::string>());
      const Progress run = Feed(**schema, text);
      EXPECT_EQ(run.taken, text.size())
          << "refused at byte " << run.taken << " of " << absl::CEscape(text);
      EXPECT_TRUE(run.complete) << absl::CEscape(text);
      ++valid;
    }
    for (const ojson& hex : c.at("invalid")) {
      const std::string text = absl::HexStringToBytes(hex.get<std::string>());
      const Progress run = Feed(**schema, text);
      EXPECT_FALSE(run.taken == text.size() && run.complete) << absl::CEscape(text);
      refused_early += run.taken < text.size();
      ++invalid;
    }
  }
  EXPECT_GE(valid, 300);
  EXPECT_GE(invalid, 500);
  EXPECT_GE(refused_early, invalid / 2);
}

// No state is a dead end: random walks over the bytes each state takes (all 256 tried), leaning
// towards closing bytes, never meet a state that takes none, and end complete. Over the golden
// schemas and a recursive one whose required chain runs into the nesting bound.
TEST(JsonSchemaTest, EveryStateCanGoOnUntilComplete) {
  std::ifstream in(kData / "json" / "schema_cases.json");
  std::vector<ojson> schemas;
  const ojson file = ojson::parse(in);
  for (const ojson& c : file.at("schemas")) schemas.push_back(c.at("schema"));
  schemas.push_back(ojson::parse(R"({"type": "object", "$defs": {"n": {"type": "object",
      "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"type": "array", "minItems": 1,
                     "items": {"anyOf": [{"$ref": "#/$defs/m"}, {"type": "null"}]}}},
      "required": ["b"]}, "m": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}},
      "required": ["c"]}}, "properties": {"r": {"$ref": "#/$defs/n"}}, "required": ["r"]})"));
  std::mt19937 rng(7);
  int walks = 0;
  for (const ojson& json_schema : schemas) {
    auto schema = JsonSchema::Compile(json_schema);
    ASSERT_TRUE(schema.ok()) << schema.status();
    for (int walk = 0; walk < 20; ++walk, ++walks) {
      JsonSchemaState state(schema->get());
      std::string text;
      for (int i = 0; i < 4000 && !state.complete(); ++i) {
        std::vector<uint8_t> next;
        for (int b = 0; b < 256; ++b) {
          JsonSchemaState copy = state;
          if (copy.Step(static_cast<uint8_t>(b))) next.push_back(static_cast<uint8_t>(b));
        }
        ASSERT_FALSE(next.empty()) << json_schema.dump() << " after " << absl::CEscape(text);
        uint8_t b = next[rng() % next.size()];
        for (uint8_t c : next) {
          if ((c == '}' || c == ']' || c == '"') && rng() % 2 == 0) b = c;
        }
        ASSERT_TRUE(state.Step(b));
        text += static_cast<char>(b);
      }
      EXPECT_TRUE(state.complete()) << absl::CEscape(text);
    }
  }
  EXPECT_EQ(walks, 300);
}

struct Refusal {
  const char* schema;
  const char* message;  // a part of the error
};

TEST(JsonSchemaTest, RefusesWhatItDoesNotImplementByName) {
  const Refusal refusals[] = {
      {R"({"type": "string"})", "top level must be"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}})",
       "at #/properties/a: keyword \"pattern\" is not supported"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "format": "date"}}})",
       "\"format\""},
      {R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}})",
       "\"minLength\""},
      {R"({"type": "object", "properties": {"a": {"type": "number", "minimum": 0}}})",
       "\"minimum\""},
      {R"({"type": "object", "properties": {"a": {"oneOf": [{"const": "a"},
          {"enum": ["b", "a"]}]}}})",
       "at #/properties/a: its alternatives #/properties/a/oneOf/0 and #/properties/a/oneOf/1 "
       "both take \"a\"; a oneOf's instance must match exactly one"},
      {R"({"type": "object", "properties": {"a": {"oneOf": [
          {"type": "object", "properties": {"k": {"const": 1}, "x": {"type": "string"}},
           "required": ["x"]},
          {"type": "object", "properties": {"k": {"const": 2}}, "required": ["k"]}]}}})",
       "at #/properties/a: its alternatives #/properties/a/oneOf/0 and #/properties/a/oneOf/1 "
       "are objects (#/properties/a/oneOf/0 and #/properties/a/oneOf/1) with no property that "
       "tells them apart"},
      // The same alternative twice, and one again inside another's anyOf: every instance of it
      // matches two.
      {R"({"type": "object", "properties": {"v": {"oneOf": [{"$ref": "#/$defs/A"},
          {"$ref": "#/$defs/A"}]}}, "$defs": {"A": {"type": "object",
          "properties": {"k": {"const": "a"}}, "required": ["k"]}}})",
       "its alternatives #/properties/v/oneOf/0 and #/properties/v/oneOf/1 both take every "
       "instance of #/$defs/A"},
      {R"({"type": "object", "properties": {"v": {"oneOf": [{"$ref": "#/$defs/S"},
          {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/S"}]}]}},
          "$defs": {"S": {"type": "string"}}})",
       "both take every instance of #/$defs/S"},
      {R"({"type": "object", "properties": {"v": {"oneOf": [{"type": "string"},
          {"enum": ["a", 1]}]}}})",
       "its alternatives #/properties/v/oneOf/0 and #/properties/v/oneOf/1 can both begin with "
       "'\"'"},
      {R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}],
          "oneOf": [{"type": "string"}]}}})",
       "\"anyOf\" beside \"oneOf\" is not supported"},
      {R"({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}})", "\"allOf\""},
      {R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})", "\"not\""},
      {R"({"type": "object", "patternProperties": {"x": {"type": "string"}}})",
       "\"patternProperties\""},
      {R"({"type": "object", "if": {}})", "\"if\""},
      {R"({"type": "object", "additionalProperties": true})",
       "at #/additionalProperties: only false"},
      {R"({"type": "object", "additionalProperties": {"type": "string"}})",
       "#/additionalProperties"},
      {R"({"type": "object", "properties": {"a": {}}})",
       "at #/properties/a: a schema needs \"type\""},
      {R"({"type": "object", "properties": {"a": {"type": "array"}}})",
       "at #/properties/a/items: an array needs"},
      {R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"},
          "maxItems": 100000}}})",
       "#/properties/a/maxItems"},
      {R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"},
          "minItems": 3, "maxItems": 2}}})",
       "#/properties/a/minItems"},
      {R"({"type": "object", "properties": {"a": {"type": "strin"}}})", "unknown type \"strin\""},
      {R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]})",
       "#/required: \"b\" is not a property"},
      {R"({"type": "object", "properties": {"a": {"enum": [1.5]}}})", "#/properties/a/enum"},
      {R"({"type": "object", "properties": {"a": {"enum": []}}})", "#/properties/a/enum"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "enum": [1]}}})",
       "is not of the schema's type"},
      {R"({"type": "object", "properties": {"a": {"anyOf": [
          {"type": "object", "properties": {"b": {"type": "string"}}},
          {"type": "object", "properties": {"c": {"type": "null"}}},
          {"type": "object", "properties": {"b": {"type": "integer"}}}]}}})",
       "at #/properties/a: its object alternatives #/properties/a/anyOf/0 and "
       "#/properties/a/anyOf/2 give property \"b\" different schemas"},
      {R"({"type": "object", "properties": {"a": {"anyOf": [
          {"type": "object", "properties": {"b": {"const": "x"}}},
          {"type": "object", "properties": {"b": {"type": "string"}}}]}}})",
       "give property \"b\" different schemas"},
      {R"({"anyOf": [{"type": "object"}, {"type": "object", "properties": {}}]})",
       "top level must be"},
      {R"({"type": "object", "properties": {"a": {"anyOf": [{"enum": ["x"]},
          {"type": "string"}]}}})",
       "can both begin with '\"'"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})",
       "$ref names no schema"},
      {R"({"type": "object", "properties": {"a": {"$ref": "http://example.com/s"}}})",
       "$ref must be"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/b", "type": "string"}},
          "$defs": {"b": {"type": "string"}}})",
       "at #/properties/a: \"$ref\" beside \"type\" is not supported"},
      // A "$ref" alone (annotations aside) in a definition: an alias, refused as one.
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}},
          "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "string"}}})",
       "at #/$defs/a: a definition that is only a \"$ref\" (an alias of \"#/$defs/b\") is not "
       "supported"},
      {R"({"type": "object", "definitions": {"a": {"$ref": "#", "title": "again"}}})",
       "at #/definitions/a: a definition that is only a \"$ref\" (an alias of \"#\")"},
      {R"({"$ref": "#/$defs/o", "$defs": {"o": {"type": "object"}}})",
       "at #: \"$ref\" at the top level is not supported"},
      {R"({"type": "object", "$ref": "#/$defs/o", "$defs": {"o": {"type": "object"}}})",
       "at #: \"$ref\" beside \"type\" is not supported"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})",
       "no finite instance"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}},
          "$defs": {"x": {"anyOf": [{"$ref": "#/$defs/x"}]}}})",
       "refers only to itself"},
      {R"({"type": "object", "$defs": {"unused": {"type": "string", "maxLength": 3}}})",
       "at #/$defs/unused: keyword \"maxLength\""},
      {R"({"type": "object", "properties": {"a": {"type": "string", "properties": {}}}})",
       "\"properties\" does not apply to type string"},
      {R"(true)", "must be an object"},
      {R"({"type": "object", "properties": {"a": {"type": ["string", "string"]}}})", "twice"},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.schema);
    const auto schema = JsonSchema::Parse(r.schema);
    ASSERT_FALSE(schema.ok());
    EXPECT_EQ(schema.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(schema.status().message().find(r.message), std::string::npos) << schema.status();
  }
  // Too deep a document, too many nodes: refused, neither crashing nor slow.
  std::string deep = R"({"type": "object", "properties": {"a": )";
  for (int i = 0; i < 200; ++i) deep += R"({"type": "array", "items": )";
  deep += R"({"type": "string"})";
  deep.append(202, '}');
  EXPECT_NE(JsonSchema::Parse(deep).status().message().find("nests deeper"), std::string::npos);
  ojson wide = {{"type", "object"}, {"properties", ojson::object()}};
  for (int i = 0; i < 65; ++i) {
    wide["properties"][absl::StrCat("p", i)] = {{"type", "string"}};
  }
  EXPECT_NE(JsonSchema::Compile(wide).status().message().find("more than 64 properties"),
            std::string::npos);
  // A oneOf's alternatives are compared two by two: past what could compile, refused first.
  ojson choices = ojson::array();
  for (int i = 0; i < 129; ++i) choices.push_back({{"const", i}});
  const ojson one_of = {{"type", "object"}, {"properties", {{"a", {{"oneOf", choices}}}}}};
  EXPECT_NE(JsonSchema::Compile(one_of).status().message().find(
                "opens to 129 alternatives (nested ones included), more than the 128"),
            std::string::npos)
      << JsonSchema::Compile(one_of).status();
  EXPECT_FALSE(JsonSchema::Parse("{").ok());
}

// An anyOf's objects are read as one object whose names and values narrow which of them it is:
// each alternative's own properties in its own order, a discriminator's value choosing, a
// property shared with the same schema (descriptions aside) staying open to both.
TEST(JsonSchemaTest, ReadsAnAnyOfsObjectsAsOneObject) {
  const auto schema = JsonSchema::Parse(R"({"type": "object", "properties": {"s": {"anyOf": [
      {"type": "object", "properties": {"kind": {"const": "circle"}, "id": {"type": "integer"},
       "r": {"type": "number"}}, "required": ["kind", "r"]},
      {"type": "object", "properties": {"kind": {"const": "rect"},
       "id": {"type": "integer", "description": "shared"}, "w": {"type": "number"}},
       "required": ["kind", "w"]},
      {"type": "object", "properties": {"label": {"type": "string"},
       "kind": {"enum": ["note", "rect"]}}, "required": ["kind"]},
      {"type": "null"}]}}, "required": ["s"]})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  auto accepts = [&](const std::string& text) {
    const Progress run = Feed(**schema, text);
    return run.taken == text.size() && run.complete;
  };
  auto taken = [&](const std::string& text) { return Feed(**schema, text).taken; };
  EXPECT_TRUE(accepts(R"({"s": {"kind": "circle", "r": 2}})"));
  EXPECT_TRUE(accepts(R"({"s": {"kind": "circle", "id": 3, "r": 2}})"));
  EXPECT_TRUE(accepts(R"({"s": {"kind": "rect", "id": 3, "w": 1.5}})"));
  EXPECT_TRUE(accepts(R"({"s": {"kind": "rect"}})"));  // the third: label optional
  EXPECT_TRUE(accepts(R"({"s": {"label": "x", "kind": "note"}})"));
  EXPECT_TRUE(accepts(R"({"s": null})"));
  // After "label" only the third is alive: its kinds alone, refused at the 'c'.
  const std::string circle_label = R"({"s": {"label": "x", "kind": "circle"}})";
  EXPECT_EQ(taken(circle_label), circle_label.find("circle"));
  // "circle" chose the first: no "w"; "note" the third: no "id".
  EXPECT_FALSE(accepts(R"({"s": {"kind": "circle", "w": 1}})"));
  EXPECT_FALSE(accepts(R"({"s": {"kind": "note", "id": 1}})"));
  EXPECT_FALSE(accepts(R"({"s": {"kind": "circle"}})"));          // r is required
  EXPECT_FALSE(accepts(R"({"s": {"kind": "rect", "id": 1}})"));   // w is required, and the third
                                                                  // has no id
  EXPECT_FALSE(accepts(R"({"s": {"r": 2, "kind": "circle"}})"));  // the first's order
  EXPECT_FALSE(accepts(R"({"s": {}})"));

  // A discriminator written as an anyOf of consts is a list of values too.
  const auto listed = JsonSchema::Parse(R"({"type": "object", "properties": {"s": {"anyOf": [
      {"type": "object", "properties": {"kind": {"anyOf": [{"const": "a"}, {"const": "b"}]},
       "x": {"type": "integer"}}, "required": ["kind", "x"]},
      {"type": "object", "properties": {"kind": {"const": "c"}, "y": {"type": "boolean"}},
       "required": ["kind", "y"]}]}}, "required": ["s"]})");
  ASSERT_TRUE(listed.ok()) << listed.status();
  auto listed_accepts = [&](const std::string& text) {
    const Progress run = Feed(**listed, text);
    return run.taken == text.size() && run.complete;
  };
  EXPECT_TRUE(listed_accepts(R"({"s": {"kind": "b", "x": 1}})"));
  EXPECT_TRUE(listed_accepts(R"({"s": {"kind": "c", "y": true}})"));
  EXPECT_FALSE(listed_accepts(R"({"s": {"kind": "c", "x": 1}})"));
  EXPECT_FALSE(listed_accepts(R"({"s": {"kind": "a", "y": true}})"));
}

// A oneOf is proven exclusive on its alternatives as written, so a nested discriminated union
// (Pydantic's: two cats told apart by "color" inside a oneOf with a dog, all three with
// "pet_type") is one; and two properties that are the same recursive anyOf (a tree whose nodes
// are of two kinds) have the same schema, however the compiler meets them.
TEST(JsonSchemaTest, ReadsNestedAndRecursiveUnions) {
  const auto pets = JsonSchema::Parse(R"({"type": "object", "properties": {"pet": {"oneOf": [
      {"oneOf": [{"$ref": "#/$defs/BlackCat"}, {"$ref": "#/$defs/WhiteCat"}],
       "discriminator": {"propertyName": "color"}}, {"$ref": "#/$defs/Dog"}],
      "discriminator": {"propertyName": "pet_type"}}}, "required": ["pet"],
      "$defs": {
        "BlackCat": {"type": "object", "properties": {"pet_type": {"const": "cat"},
          "color": {"const": "black"}, "black_name": {"type": "string"}},
          "required": ["pet_type", "color", "black_name"]},
        "WhiteCat": {"type": "object", "properties": {"pet_type": {"const": "cat"},
          "color": {"const": "white"}, "white_name": {"type": "string"}},
          "required": ["pet_type", "color", "white_name"]},
        "Dog": {"type": "object", "properties": {"pet_type": {"const": "dog"},
          "name": {"type": "string"}}, "required": ["pet_type", "name"]}}})");
  ASSERT_TRUE(pets.ok()) << pets.status();
  auto accepts = [](const JsonSchema& s, const std::string& text) {
    const Progress run = Feed(s, text);
    return run.taken == text.size() && run.complete;
  };
  EXPECT_TRUE(
      accepts(**pets, R"({"pet": {"pet_type": "cat", "color": "black", "black_name": "x"}})"));
  EXPECT_TRUE(
      accepts(**pets, R"({"pet": {"pet_type": "cat", "color": "white", "white_name": "y"}})"));
  EXPECT_TRUE(accepts(**pets, R"({"pet": {"pet_type": "dog", "name": "z"}})"));
  EXPECT_FALSE(
      accepts(**pets, R"({"pet": {"pet_type": "cat", "color": "black", "white_name": "x"}})"));
  EXPECT_FALSE(accepts(**pets, R"({"pet": {"pet_type": "dog", "color": "black"}})"));

  const auto tree = JsonSchema::Parse(R"({"type": "object",
      "properties": {"root": {"$ref": "#/$defs/A"}}, "required": ["root"],
      "$defs": {
        "A": {"type": "object", "properties": {"kind": {"const": "a"},
          "next": {"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]}},
          "required": ["kind"]},
        "B": {"type": "object", "properties": {"kind": {"const": "b"},
          "next": {"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]}},
          "required": ["kind"]}}})");
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_TRUE(
      accepts(**tree, R"({"root": {"kind": "a", "next": {"kind": "b", "next": {"kind": "a"}}}})"));
  EXPECT_FALSE(accepts(**tree, R"({"root": {"kind": "a", "next": {"kind": "c"}}})"));
}

// A property of each object's own schema may follow a discriminator that has chosen: required,
// before it, with values no other alternative takes (tool calls: a name, then its arguments).
TEST(JsonSchemaTest, ReadsAPropertyADiscriminatorDecided) {
  const std::string calls = R"({"type": "object", "properties": {"c": {"anyOf": [
      {"type": "object", "properties": {"name": {"const": "f"},
       "arguments": {"type": "object", "properties": {"x": {"type": "integer"}}}},
       "required": ["name", "arguments"]},
      {"type": "object", "properties": {"name": {"enum": ["g", "h"]},
       "arguments": {"type": "object", "properties": {"y": {"type": "string"}},
                     "required": ["y"]}},
       "required": ["name", "arguments"]}]}}, "required": ["c"]})";
  const auto schema = JsonSchema::Parse(calls);
  ASSERT_TRUE(schema.ok()) << schema.status();
  auto accepts = [&](const std::string& text) {
    const Progress run = Feed(**schema, text);
    return run.taken == text.size() && run.complete;
  };
  EXPECT_TRUE(accepts(R"({"c": {"name": "f", "arguments": {"x": 1}}})"));
  EXPECT_TRUE(accepts(R"({"c": {"name": "f", "arguments": {}}})"));
  EXPECT_TRUE(accepts(R"({"c": {"name": "h", "arguments": {"y": "a"}}})"));
  EXPECT_FALSE(accepts(R"({"c": {"name": "f", "arguments": {"y": "a"}}})"));
  EXPECT_FALSE(accepts(R"({"c": {"name": "g", "arguments": {"x": 1}}})"));
  EXPECT_FALSE(accepts(R"({"c": {"name": "g", "arguments": {}}})"));  // y is required

  // Refused: the discriminator optional in one, or a value both take.
  const std::string optional = absl::StrReplaceAll(calls, {{R"("required": ["name", "arguments"]},
      {"type": "object", "properties": {"name": {"enum")",
                                                            R"("required": ["arguments"]},
      {"type": "object", "properties": {"name": {"enum")"}});
  const std::string shared = absl::StrReplaceAll(calls, {{R"(["g", "h"])", R"(["g", "f"])"}});
  for (const std::string& refused : {optional, shared}) {
    ASSERT_NE(refused, calls);
    const auto r = JsonSchema::Parse(refused);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("give property \"arguments\" different schemas"),
              std::string::npos)
        << r.status();
  }
}

// An anyOf's enum and const alternatives are one list of all their values (each once), which
// the literal automaton tells apart byte by byte; what else begins like one of them is still
// refused, naming both, and so are more values together than a list holds.
TEST(JsonSchemaTest, MergesAnAnyOfsEnumAndConstAlternatives) {
  const auto schema = JsonSchema::Parse(R"({"type": "object",
      "properties": {"a": {"anyOf": [{"const": "x"}, {"$ref": "#/$defs/y"}, {"enum": ["x", 7]},
                                     {"type": "object"}, {"const": 70}]},
                     "b": {"$ref": "#/$defs/y"}},
      "required": ["a"], "$defs": {"y": {"const": "y"}}})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  auto accepts = [&](const JsonSchema& s, const std::string& text) {
    const Progress run = Feed(s, text);
    return run.taken == text.size() && run.complete;
  };
  EXPECT_TRUE(accepts(**schema, R"({"a": "x"})"));
  EXPECT_TRUE(accepts(**schema, R"({"a": "y", "b": "y"})"));
  EXPECT_TRUE(accepts(**schema, R"({"a": 7})"));
  EXPECT_TRUE(accepts(**schema, R"({"a": 70})"));
  EXPECT_TRUE(accepts(**schema, R"({"a": {}})"));
  EXPECT_FALSE(accepts(**schema, R"({"a": 700})"));
  EXPECT_FALSE(accepts(**schema, R"({"a": "z"})"));
  EXPECT_FALSE(accepts(**schema, R"({"a": "x", "b": "x"})"));  // the definition alone is "y"

  const Refusal refusals[] = {
      {R"({"type": "object", "properties": {"a": {"anyOf": [{"const": "a"}, {"type": "string"}]}}})",
       "at #/properties/a: alternatives #/properties/a/anyOf/0 and #/properties/a/anyOf/1 can "
       "both begin with '\"'"},
      {R"({"type": "object", "properties": {"a": {"anyOf": [{"const": "a"}, {"enum": ["b"]},
          {"type": "string"}]}}})",
       "at #/properties/a: alternatives #/properties/a (its enum and const alternatives) and "
       "#/properties/a/anyOf/2 can both begin with '\"'"},
      {R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"const": 1},
          {"const": 2}]}}})",
       "at #/properties/a: alternatives #/properties/a/anyOf/0 and #/properties/a (its enum and "
       "const alternatives) can both begin with '1'"},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.schema);
    const auto refused = JsonSchema::Parse(r.schema);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find(r.message), std::string::npos) << refused.status();
  }

  // Values v<first>..v<last> in each alternative: the count is of different values.
  auto values = [](std::initializer_list<std::pair<int, int>> alternatives) {
    ojson s = {{"type", "object"}, {"properties", {{"a", {{"anyOf", ojson::array()}}}}}};
    for (const auto& [first, last] : alternatives) {
      ojson e = ojson::array();
      for (int i = first; i <= last; ++i) e.push_back(absl::StrCat("v", i));
      s["properties"]["a"]["anyOf"].push_back({{"enum", e}});
    }
    return s;
  };
  const auto full = JsonSchema::Compile(values({{0, 39}, {24, 63}}));  // 64, 16 of them twice
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(accepts(**full, R"({"a": "v0"})"));
  EXPECT_TRUE(accepts(**full, R"({"a": "v30"})"));
  EXPECT_TRUE(accepts(**full, R"({"a": "v63"})"));
  EXPECT_FALSE(accepts(**full, R"({"a": "v64"})"));
  const auto over = JsonSchema::Compile(values({{0, 39}, {24, 64}}));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("at #/properties/a: its enum and const alternatives "
                                         "have 65 different values together, more than the 64"),
            std::string::npos)
      << over.status();
}

// The limits of the plain form: property order, a nesting bound that recursion respects, array
// bounds, integers without fraction.
TEST(JsonSchemaTest, WritesThePlainFormOnly) {
  const auto schema = JsonSchema::Parse(R"({"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                     "c": {"type": "array", "items": {"type": "null"}, "minItems": 1,
                           "maxItems": 2}},
      "required": ["b"]})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  auto accepts = [&](const std::string& text) {
    const Progress run = Feed(**schema, text);
    return run.taken == text.size() && run.complete;
  };
  EXPECT_TRUE(accepts(R"({"b": ""})"));
  EXPECT_TRUE(accepts(R"({"a": -10, "b": "x", "c": [null, null]})"));
  EXPECT_FALSE(accepts(R"({"b": "x", "a": 1})"));   // out of the schema's order
  EXPECT_FALSE(accepts(R"({"a": 1})"));             // b is required
  EXPECT_FALSE(accepts(R"({"a": 1.0, "b": ""})"));  // an integer has no fraction here
  EXPECT_FALSE(accepts(R"({"b": "", "c": []})"));   // minItems
  EXPECT_FALSE(accepts(R"({"b": "", "c": [null, null, null]})"));  // maxItems
  EXPECT_FALSE(accepts(R"({"b": "", "d": 1})"));                   // no other property
  EXPECT_FALSE(accepts(R"({"b": "",})"));
  EXPECT_EQ(Feed(**schema, R"({"b": "x"} )").taken, 10u);  // nothing after the object

  // Numbers keep to what a double holds (nlohmann::json refuses 1e400 as an overflow).
  const auto numbers = JsonSchema::Parse(
      R"({"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]})");
  ASSERT_TRUE(numbers.ok()) << numbers.status();
  auto number = [&](const std::string& n) {
    const std::string text = "{\"n\":" + n + "}";
    const Progress run = Feed(**numbers, text);
    return run.taken == text.size() && run.complete;
  };
  EXPECT_TRUE(number("-12345678901234567890.12345678901234567890e-99"));
  EXPECT_TRUE(number("1E+05"));
  EXPECT_FALSE(number("123456789012345678901"));
  EXPECT_FALSE(number("0.123456789012345678901"));
  EXPECT_FALSE(number("1e100"));
  EXPECT_FALSE(number("149e419"));

  // Recursion stops at kMaxSchemaDepth containers: past it, an optional nested value cannot
  // begin, and what is open can still end.
  const auto tree = JsonSchema::Parse(R"({"type": "object",
      "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}}, "required": ["v"]})");
  ASSERT_TRUE(tree.ok()) << tree.status();
  std::string text;
  for (int i = 0; i < kMaxSchemaDepth - 1; ++i) text += R"({"next":)";
  JsonSchemaState state(tree->get());
  for (char c : text) ASSERT_TRUE(state.Step(static_cast<uint8_t>(c)));
  JsonSchemaState deeper = state;  // container 16 opens, but "next" could not hold one more
  ASSERT_TRUE(deeper.Step('{'));
  ASSERT_TRUE(deeper.Step('"'));
  EXPECT_FALSE(JsonSchemaState(deeper).Step('n'));
  EXPECT_TRUE(JsonSchemaState(deeper).Step('v'));
  for (char c : std::string(R"({"v":1})")) ASSERT_TRUE(state.Step(static_cast<uint8_t>(c)));
  for (int i = 0; i < kMaxSchemaDepth - 1; ++i) {
    for (char c : std::string(R"(,"v":2})")) ASSERT_TRUE(state.Step(static_cast<uint8_t>(c)));
  }
  EXPECT_TRUE(state.complete());
}

// A property name or enum value is written byte for byte, so each of its bytes needs a token:
// a vocabulary without the lead byte of a non-ASCII character (one without byte tokens) is
// refused when the request's sampler is made, instead of stalling the output there. A schema too
// deep to copy safely is refused before it is parsed into a value.
TEST(JsonSchemaTest, RefusesWhatTheVocabularyCannotSpellOrTooDeep) {
  std::vector<std::string> bytes;
  for (int c = 0x20; c < 0x7F; ++c) bytes.emplace_back(1, static_cast<char>(c));
  bytes.push_back("\xE6\x97\xA5");  // a whole character, no byte of it alone
  bytes.push_back("");              // the end token
  std::vector<std::string> without_byte_tokens = bytes;
  without_byte_tokens.resize(bytes.size() + 0x80);  // the same ids, the bytes' ones empty
  for (int c = 0x80; c < 0x100; ++c) bytes.emplace_back(1, static_cast<char>(c));
  auto ascii_only = JsonVocabulary::Create(without_byte_tokens);
  ASSERT_TRUE(ascii_only.ok()) << ascii_only.status();
  auto every_byte = JsonVocabulary::Create(bytes);
  ASSERT_TRUE(every_byte.ok()) << every_byte.status();
  const int32_t end = 96;

  auto schema =
      JsonSchema::Parse(R"({"type": "object", "properties": {"\u65e5": {"type": "integer"}},
                                      "required": ["\u65e5"]})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  SamplingParams params;
  params.json_schema = *schema;
  params.json_output = *ascii_only;
  auto refused = Sampler::Create(params, static_cast<int32_t>(bytes.size()), {&end, 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("property name \"\xE6\x97\xA5\" needs the byte 0xE6"),
            std::string::npos)
      << refused.status();
  params.json_output = *every_byte;
  EXPECT_TRUE(Sampler::Create(params, static_cast<int32_t>(bytes.size()), {&end, 1}).ok());
  params.json_schema =
      *JsonSchema::Parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  params.json_output = *ascii_only;
  EXPECT_TRUE(Sampler::Create(params, static_cast<int32_t>(bytes.size()), {&end, 1}).ok());

  const std::string deep = R"({"type": "object", "properties": {"a": )" + std::string(100000, '[') +
                           std::string(100000, ']') + "}}";
  const auto too_deep = JsonSchema::Parse(deep);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(too_deep.status().message().find("nests deeper than 64 levels"), std::string::npos)
      << too_deep.status();
}

}  // namespace
}  // namespace ridge
