// Constrained decoding to a JSON Schema (OpenAI's response_format {"type": "json_schema"}).
//
// JsonSchema::Compile turns a schema into an immutable table of nodes, refusing (naming the
// keyword and its place, as a JSON pointer) whatever it does not implement exactly. The subset is
// what OpenAI's strict structured outputs use: "type" (object, array, string, number, integer,
// boolean, null, or a list of them), "properties", "required", "additionalProperties" (false;
// absent counts as false), "items", "minItems"/"maxItems", "enum" and "const" (strings, integers,
// booleans, null), "anyOf", "$defs"/"definitions" with local "$ref" (recursion included), and
// "oneOf" where its alternatives are exclusive by construction, each two of them: they begin
// differently, their enum and const values differ, or they are objects that both require a
// property that is an enum or const in each with no value in common (Pydantic's "discriminator"
// beside it is ignored), so that every output matches exactly one; "description", "title",
// "default", "examples", "$comment" and "$schema" are ignored. The top level is an object.
// (json_schema_compiler.h: how.)
//
// The output it allows is a subset of the schema's instances, written in a plain form:
//   - an object's properties come in the schema's order; the required ones all, the others
//     each present or skipped;
//   - an enum or const value, and a property name, is spelled as nlohmann::json dumps it
//     (escapes only where JSON needs them), an integer with neither fraction nor exponent;
//   - the alternatives of an anyOf (and of a type list) must differ in their first byte (at most
//     one array, one string, one number, ...): the automaton chooses by the first byte and never
//     backtracks. Its enum and const alternatives (null and boolean too) count as one, the list
//     of all their values (at most kMaxSchemaEnumValues), read byte by byte: two string values
//     do not clash, a string value beside {"type": "string"} does. Its object alternatives (at
//     most kMaxSchemaObjectAlternatives) count as one too, an object whose names and values
//     narrow which of them it is: each writes its own properties in its own order, and a name
//     two of them share must have the same schema in both (annotations aside), be an enum or
//     const in each (a discriminator, as in {"kind": {"const": "circle"}, ...}), whose value
//     then chooses, or come after a discriminator in each (required, with values of its own:
//     {"name": {"const": "f"}, "arguments": {...f's...}}), which has chosen already;
//   - containers nest at most kMaxSchemaDepth deep, which also bounds recursion; a property or
//     an item that could not be finished within the bound is not begun;
//   - whitespace between tokens as JsonByteState allows it (runs of at most 48 bytes).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "sampling/json_lexer.h"
#include "sampling/json_vocabulary.h"
#include "sampling/mask_cache.h"

namespace ridge {

inline constexpr int kMaxSchemaDepth = 16;            // containers open at once in the output
inline constexpr size_t kMaxSchemaBytes = 64 * 1024;  // the schema as compact JSON
inline constexpr int kMaxSchemaNesting = 64;          // the schema document's own nesting
inline constexpr size_t kMaxSchemaNodes = 2048;
inline constexpr size_t kMaxSchemaProperties = 64;  // per object
inline constexpr size_t kMaxSchemaEnumValues = 64;
inline constexpr size_t kMaxSchemaObjectAlternatives = 16;  // objects in one anyOf
inline constexpr int64_t kMaxSchemaItems = 256;             // minItems and maxItems
inline constexpr size_t kMaxSchemaLiteralBytes = 1024;      // a property name or enum value as JSON

class JsonSchema;

// A place in an output constrained to a JsonSchema, a byte at a time: the containers open (a
// stack of frames) and the scalar being read. Trivially copyable (the vocabulary walk copies it
// at every trie node); the schema must outlive it.
class JsonSchemaState {
 public:
  explicit JsonSchemaState(const JsonSchema* schema) : schema_(schema) {}

  // Takes byte `c`: true if the text so far plus `c` can still become an instance. On false the
  // state is unspecified (callers step a copy).
  bool Step(uint8_t c);
  bool complete() const { return mode_ == Mode::kDone; }
  // In a string of any content, between characters (see JsonVocabulary::Mask).
  bool in_string_body() const { return mode_ == Mode::kString && string_.in_body(); }
  // This state with what its mode does not read cleared: equal keys, equal futures.
  JsonSchemaState key() const;
  bool operator==(const JsonSchemaState&) const = default;

 private:
  enum class Mode : uint8_t {
    kStart,    // before the top-level object
    kValue,    // a value of node value_ to come
    kObject,   // between tokens in the top frame's object
    kArray,    // between tokens in the top frame's array
    kColon,    // after a property's name; its value, of node value_, to come
    kKey,      // in a property name: candidates_ of the top frame's names, offset_ bytes read
    kLiteral,  // in an enum value: candidates_ of node value_'s literals, offset_ bytes read
    kString,   // in a string of any content
    kNumber,   // in a number (or integer)
    kDone,     // the top-level object is complete
  };
  enum Phase : uint8_t { kFirst, kAfterComma, kAfterValue };
  // Six bytes: the trie walk copies the state at every node it visits.
  struct Frame {
    uint16_t node : 14 = 0;
    uint16_t phase : 2 = kFirst;
    // object: the next property that may come; array: items so far; object union: 1 + the last
    // name read (as an index into the union's names), 0 before the first.
    uint16_t index = 0;
    uint16_t alive = 0;  // object union: bit a, alternative a can still be the one written
    bool operator==(const Frame&) const = default;
  };
  static_assert(kMaxSchemaNodes <= (1u << 14), "a frame's node takes 14 bits");

  bool BetweenTokens(uint8_t c);
  bool BeginValue(int32_t node, uint8_t c);
  bool Begin(int32_t leaf, uint8_t c);
  bool ObjectByte(uint8_t c);
  bool CanClose(const Frame& f) const;
  uint64_t UnionNext(const Frame& f, int alternative) const;
  void EndLiteral();
  bool ArrayByte(uint8_t c);
  bool KeyByte(uint8_t c);
  bool LiteralByte(uint8_t c);
  void EndValue();
  bool Fits(int32_t node) const;
  uint64_t KeyCandidates() const;

  const JsonSchema* schema_;
  std::array<Frame, kMaxSchemaDepth> frames_{};
  uint8_t depth_ = 0;
  Mode mode_ = Mode::kStart;
  uint8_t whitespace_run_ = 0;
  uint16_t value_ = 0;
  uint16_t offset_ = 0;
  uint64_t candidates_ = 0;
  JsonStringLexer string_;
  JsonNumberLexer number_;
};

// What the top level of a schema may be: an object (as OpenAI requires of response_format), or
// also an array (the server's own constraints, such as a list of tool calls).
enum class JsonSchemaTop : uint8_t { kObject, kObjectOrArray };

class JsonSchema {
 public:
  // Errors are InvalidArgument, naming the offending keyword and where it is.
  static absl::StatusOr<std::shared_ptr<const JsonSchema>> Compile(
      const nlohmann::ordered_json& schema, JsonSchemaTop top = JsonSchemaTop::kObject);
  // The schema as JSON text (object keys in the text's order).
  static absl::StatusOr<std::shared_ptr<const JsonSchema>> Parse(std::string_view text);

  enum class Kind : uint8_t {
    kObject,
    kArray,
    kString,
    kNumber,
    kInteger,
    kLiterals,
    kAnyOf,
    kObjectUnion,
  };
  struct Node {
    Kind kind = Kind::kAnyOf;
    int32_t min_depth = 0;  // containers an instance needs at least
    // kLiterals: the values as JSON text; kObject: the property names as JSON strings.
    std::vector<std::string> literals;
    // kObject: each property's node; kArray: the items' node; kAnyOf: its alternatives, none of
    // them an anyOf, at most one kLiterals (the anyOf's literal alternatives merged) and at most
    // one object (a kObject, or its object alternatives merged into a kObjectUnion);
    // kObjectUnion: those alternatives, kObject nodes.
    std::vector<int32_t> children;
    uint64_t required = 0;   // kObject: bit i, property i is required
    int32_t min_items = 0;   // kArray
    int32_t max_items = -1;  // kArray; -1 unbounded
    bool one_of = false;     // kAnyOf: a "oneOf" (its alternatives proven exclusive)
    // kObjectUnion: `literals` holds every name of its alternatives once; name_values[m] is the
    // node of name m's value (one the alternatives with that name share, a kLiterals of all
    // their values, whose allowed_by says which alternatives allow each, or kDecidedValue: the
    // one alternative still alive when it is read has its own); alternative a's properties, in
    // its order, are the names member_names[member_begin[a] .. member_begin[a+1]).
    std::vector<int32_t> name_values;
    std::vector<uint8_t> member_names;
    std::vector<uint16_t> member_begin;
    // kLiterals of a kObjectUnion's name: bit a of allowed_by[i], alternative a allows value i.
    std::vector<uint16_t> allowed_by;
  };
  // A kObjectUnion's name_values entry: the value node is the alive alternative's own.
  static constexpr int32_t kDecidedValue = -1;
  const Node& node(int32_t i) const { return nodes_[i]; }
  size_t nodes() const { return nodes_.size(); }

  // OK when `vocabulary` can spell every property name and enum value of the schema, which an
  // output must write byte for byte: each byte has a token of its own (always so for the ASCII
  // ones; a tokenizer without byte tokens may lack the first byte of a non-ASCII character, and
  // the output would then stall there). Else FailedPrecondition naming the text and the byte.
  absl::Status CheckSpelling(const JsonVocabulary& vocabulary) const;

  // The tokens `state` (of this schema) can take next, remembered for the states used last by
  // the sequences of this schema (a request's choices share it). Thread-safe.
  std::shared_ptr<const TokenBits> AllowedBits(const JsonVocabulary& vocabulary,
                                               const JsonSchemaState& state) const;

 private:
  friend class JsonSchemaCompiler;
  struct MaskKey {
    uint64_t vocabulary;  // its serial
    JsonSchemaState state;
    bool operator==(const MaskKey&) const = default;
  };
  JsonSchema() = default;
  std::vector<Node> nodes_;  // nodes_[0]: the top level, an object (or array: JsonSchemaTop)
  // One cache per compiled schema, so per request: kept small (1.2 MB at 152K tokens) since
  // hundreds of requests may hold one each.
  static constexpr size_t kMasks = 64;
  MaskCache<MaskKey> masks_{kMasks};
};

}  // namespace ridge
