// The two JSON scalars read a byte at a time that JSON output's automata share (RFC 8259):
// a string's body after its opening quote, and a number after its first byte.
#pragma once

#include <cstdint>

namespace ridge {

inline bool IsJsonWhitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
inline bool IsJsonDigit(uint8_t c) { return c >= '0' && c <= '9'; }

// A string after its opening quote: valid UTF-8 (no overlong forms, no surrogates, nothing above
// U+10FFFF), no raw control characters, the RFC's escapes, \u with four hex digits whose UTF-16
// surrogates come in pairs (\uD83D\uDE00; a lone one is no character, and parsers such as
// nlohmann::json and serde_json refuse it, though the RFC's grammar and Python's json take it).
class JsonStringLexer {
 public:
  enum class Result : uint8_t { kFail, kMore, kClosed };
  Result Step(uint8_t c);
  // Between characters: a byte other than '"' and '\' fits or not by itself.
  bool in_body() const { return phase_ == Phase::kBody; }
  // What the future depends on, as a number (equal keys, equal futures).
  uint32_t key() const;
  bool operator==(const JsonStringLexer&) const = default;

 private:
  enum class Phase : uint8_t {
    kBody,           // between characters
    kEscape,         // after '\'
    kUnicode,        // in \uXXXX: count_ hex digits to come; surrogate_ what they may be
    kUtf8,           // in a character of several bytes: count_ more, the next in [low_, high_]
    kPairBackslash,  // after a high surrogate's \uXXXX: the '\' of its low one
    kPairU,          // then its 'u'
  };
  // In kUnicode: what its digits so far allow (kAny: the first unit of a character).
  enum class Surrogate : uint8_t {
    kAny,          // any unit but a low surrogate
    kAfterD,       // the first digit was 'D': a surrogate if the second is 8-F
    kHigh,         // a high surrogate (D800-DBFF): a low one must follow
    kLowRequired,  // the second unit of a pair: DC00-DFFF
  };
  Phase phase_ = Phase::kBody;
  Surrogate surrogate_ = Surrogate::kAny;
  uint8_t count_ = 0;
  uint8_t low_ = 0, high_ = 0;
};

// A number after its first byte ('-' or a digit); with `integer`, no fraction and no exponent.
// With `bounded`, it keeps to what a double holds, as every JSON parser reads it: at most
// kMaxJsonNumberDigits digits before the point and after it, and an exponent of at most 2
// digits (so below 1e120; 149e419 is JSON, but nlohmann::json, for one, refuses it).
inline constexpr int kMaxJsonNumberDigits = 20;
class JsonNumberLexer {
 public:
  enum class Result : uint8_t { kFail, kMore, kEnded };  // kEnded: the number ended before `c`
  // `first` must be '-' or a digit.
  JsonNumberLexer(uint8_t first, bool integer, bool bounded = false);
  JsonNumberLexer() = default;
  Result Step(uint8_t c);
  uint32_t key() const {
    return static_cast<uint32_t>(at_) | (integer_ ? 0x100u : 0u) |
           (bounded_ ? 0x200u | static_cast<uint32_t>(digits_) << 16 : 0u);
  }
  bool operator==(const JsonNumberLexer&) const = default;

 private:
  enum class At : uint8_t {
    kMinus,      // after '-': a digit
    kZero,       // after a leading 0: '.', an exponent or the end
    kInteger,    // in the integer digits
    kDot,        // after '.': a digit
    kFraction,   // in the fraction digits
    kExponent,   // after 'e': a sign or a digit
    kSign,       // after the exponent's sign: a digit
    kExpDigits,  // in the exponent's digits
  };
  // A digit more in the current part (integer, fraction or exponent), if the bound allows it.
  bool Digit() {
    return !bounded_ || ++digits_ <= (at_ == At::kExpDigits ? 2 : kMaxJsonNumberDigits);
  }

  At at_ = At::kMinus;
  bool integer_ = false;
  bool bounded_ = false;
  uint8_t digits_ = 0;  // in the current part, when bounded_
};

inline JsonStringLexer::Result JsonStringLexer::Step(uint8_t c) {
  switch (phase_) {
    case Phase::kBody:
      break;
    case Phase::kEscape:
      if (c == 'u') {
        phase_ = Phase::kUnicode;
        surrogate_ = Surrogate::kAny;
        count_ = 4;
        return Result::kMore;
      }
      phase_ = Phase::kBody;
      return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
                     c == 't'
                 ? Result::kMore
                 : Result::kFail;
    case Phase::kUnicode: {
      if (!(IsJsonDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
        return Result::kFail;
      }
      const uint8_t digit = IsJsonDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      if (count_ == 4) {  // the first digit
        if (surrogate_ == Surrogate::kLowRequired && digit != 0xD) return Result::kFail;
        if (surrogate_ == Surrogate::kAny && digit == 0xD) surrogate_ = Surrogate::kAfterD;
      } else if (count_ == 3) {  // the second: D8-DB a high surrogate, DC-DF a low one
        if (surrogate_ == Surrogate::kLowRequired && digit < 0xC) return Result::kFail;
        if (surrogate_ == Surrogate::kAfterD) {
          if (digit >= 0xC) return Result::kFail;  // a low surrogate with no high one before
          surrogate_ = digit >= 0x8 ? Surrogate::kHigh : Surrogate::kAny;
        }
      }
      if (--count_ == 0) {
        phase_ = surrogate_ == Surrogate::kHigh ? Phase::kPairBackslash : Phase::kBody;
        surrogate_ = Surrogate::kAny;
      }
      return Result::kMore;
    }
    case Phase::kPairBackslash:
      if (c != '\\') return Result::kFail;
      phase_ = Phase::kPairU;
      return Result::kMore;
    case Phase::kPairU:
      if (c != 'u') return Result::kFail;
      phase_ = Phase::kUnicode;
      surrogate_ = Surrogate::kLowRequired;
      count_ = 4;
      return Result::kMore;
    case Phase::kUtf8:
      if (c < low_ || c > high_) return Result::kFail;
      low_ = 0x80;
      high_ = 0xBF;
      if (--count_ == 0) phase_ = Phase::kBody;
      return Result::kMore;
  }
  if (c == '"') return Result::kClosed;
  if (c == '\\') {
    phase_ = Phase::kEscape;
    return Result::kMore;
  }
  if (c < 0x20) return Result::kFail;  // raw control characters must be escaped
  if (c < 0x80) return Result::kMore;
  // The first byte of a character of several (RFC 3629's table): how many follow, and the
  // range of the next, which rules out overlong forms, surrogates and code points past U+10FFFF.
  low_ = 0x80;
  high_ = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    count_ = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    count_ = 2;
    if (c == 0xE0) low_ = 0xA0;
    if (c == 0xED) high_ = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    count_ = 3;
    if (c == 0xF0) low_ = 0x90;
    if (c == 0xF4) high_ = 0x8F;
  } else {
    return Result::kFail;
  }
  phase_ = Phase::kUtf8;
  return Result::kMore;
}

inline uint32_t JsonStringLexer::key() const {
  uint32_t k = static_cast<uint32_t>(phase_);
  if (phase_ == Phase::kUnicode || phase_ == Phase::kUtf8) k |= uint32_t{count_} << 8;
  if (phase_ == Phase::kUnicode) k |= static_cast<uint32_t>(surrogate_) << 16;
  if (phase_ == Phase::kUtf8) k |= uint32_t{low_} << 16 | uint32_t{high_} << 24;
  return k;
}

inline JsonNumberLexer::JsonNumberLexer(uint8_t first, bool integer, bool bounded)
    : at_(first == '-'   ? At::kMinus
          : first == '0' ? At::kZero
                         : At::kInteger),
      integer_(integer),
      bounded_(bounded),
      digits_(first == '-' ? 0 : 1) {}

inline JsonNumberLexer::Result JsonNumberLexer::Step(uint8_t c) {
  const bool digit = IsJsonDigit(c);
  const bool exponent = !integer_ && (c == 'e' || c == 'E');
  switch (at_) {
    case At::kMinus:
      if (!digit) return Result::kFail;
      at_ = c == '0' ? At::kZero : At::kInteger;
      digits_ = 1;
      return Result::kMore;
    case At::kZero:
    case At::kInteger:
      if (digit && at_ == At::kInteger) return Digit() ? Result::kMore : Result::kFail;
      if (c == '.' && !integer_) {
        at_ = At::kDot;
        digits_ = 0;
        return Result::kMore;
      }
      if (exponent) {
        at_ = At::kExponent;
        digits_ = 0;
        return Result::kMore;
      }
      break;  // the number ends here (a digit after a leading 0 does not fit what follows)
    case At::kDot:
      if (!digit) return Result::kFail;
      at_ = At::kFraction;
      return Digit() ? Result::kMore : Result::kFail;
    case At::kFraction:
      if (digit) return Digit() ? Result::kMore : Result::kFail;
      if (exponent) {
        at_ = At::kExponent;
        digits_ = 0;
        return Result::kMore;
      }
      break;
    case At::kExponent:
      if (c == '+' || c == '-') {
        at_ = At::kSign;
        return Result::kMore;
      }
      [[fallthrough]];
    case At::kSign:
      if (!digit) return Result::kFail;
      at_ = At::kExpDigits;
      return Digit() ? Result::kMore : Result::kFail;
    case At::kExpDigits:
      if (digit) return Digit() ? Result::kMore : Result::kFail;
      break;
  }
  return Result::kEnded;
}

// One byte of the string or number an automaton is reading (`lexer`, a JsonStringLexer or a
// JsonNumberLexer), for the automaton's Step: false when the scalar cannot take `c`, true when
// it goes on, and when it ends, what `at_end()` returns. A string ends on its closing quote,
// which is `c`; a number ends before `c`, so there `at_end` must also take `c`, as what
// follows the number.
template <typename Lexer, typename AtEnd>
inline bool StepScalar(Lexer& lexer, uint8_t c, AtEnd&& at_end) {
  switch (lexer.Step(c)) {
    case Lexer::Result::kFail:
      return false;
    case Lexer::Result::kMore:
      return true;
    default:  // JsonStringLexer::Result::kClosed, JsonNumberLexer::Result::kEnded
      return at_end();
  }
}

}  // namespace ridge
