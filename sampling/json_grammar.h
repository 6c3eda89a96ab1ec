// JSON output a byte at a time (RFC 8259): whether a text can still become one JSON object, and
// whether it is one already. The automaton behind response_format {"type": "json_object"}.
//
// Beyond the RFC, to keep a model from wandering: the top level is an object (OpenAI's JSON
// mode), nothing follows it, nesting stops at kMaxJsonDepth, and a run of whitespace between
// tokens stops at kMaxJsonWhitespaceRun bytes. Strings must be valid UTF-8 (no overlong forms,
// no surrogates, nothing above U+10FFFF) without raw control characters; a \u escape takes any
// four hex digits, as the RFC's grammar does.
#pragma once

#include <cstdint>

#include "sampling/json_lexer.h"

namespace ridge {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr int kMaxJsonWhitespaceRun = 48;

// A state with what its mode does not read left out: equal keys, equal futures.
struct JsonStateKey {
  uint64_t containers = 0;
  uint64_t fields = 0;
  bool operator==(const JsonStateKey&) const = default;
};

// Trivially copyable and small (24 bytes): the vocabulary walk copies it at every trie node.
class JsonByteState {
 public:
  // Takes byte `c`: true if the text so far plus `c` can still become a JSON object. On false
  // the state is unspecified (callers step a copy).
  bool Step(uint8_t c);
  // The text so far is one whole JSON object.
  bool complete() const { return mode_ == Mode::kDone; }
  // Inside a string, between characters: a token without '"' and '\' stays inside it, and
  // whether it fits depends on its bytes alone.
  bool in_string_body() const { return mode_ == Mode::kString && string_.in_body(); }
  JsonStateKey key() const;

 private:
  enum class Mode : uint8_t {
    kStart,        // before the top-level '{'
    kObjectFirst,  // after '{': a key or '}'
    kObjectKey,    // after ',' in an object: a key
    kColon,        // after a key
    kValue,        // after ':', or ',' in an array
    kArrayFirst,   // after '[': a value or ']'
    kAfterValue,   // after a value in a container: ',' or the container's end
    kString,       // in a string, at string_ (a key when in_key_)
    kLiteral,      // in true, false or null: literal_, count_ bytes matched
    kNumber,       // in a number, at number_
    kDone,         // the object is complete
  };
  bool Whitespace();
  bool BeginValue(uint8_t c);
  bool BeginString(bool key);
  bool Open(bool object);
  bool Close(bool object);
  void EndValue();
  bool AfterValue(uint8_t c);
  bool top_is_object() const { return (containers_ >> (depth_ - 1)) & 1u; }

  Mode mode_ = Mode::kStart;
  JsonStringLexer string_;
  JsonNumberLexer number_;
  uint8_t literal_ = 0;  // 0 true, 1 false, 2 null
  uint8_t count_ = 0;
  uint8_t whitespace_run_ = 0;
  bool in_key_ = false;
  uint8_t depth_ = 0;        // open containers
  uint64_t containers_ = 0;  // bit d: the container at depth d + 1 is an object
};

}  // namespace ridge
