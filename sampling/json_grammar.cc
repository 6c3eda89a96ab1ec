#include "sampling/json_grammar.h"

namespace ridge {
namespace {

constexpr const char* kLiterals[] = {"true", "false", "null"};
constexpr uint8_t kLiteralLengths[] = {4, 5, 4};

bool IsWhitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonByteState::Step(uint8_t c) {
  switch (mode_) {
    case Mode::kString:
      return StringByte(c);
    case Mode::kEscape:
      if (c == 'u') {
        mode_ = Mode::kUnicode;
        count_ = 4;
        return true;
      }
      mode_ = Mode::kString;
      return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
             c == 't';
    case Mode::kUnicode:
      if (!IsHex(c)) return false;
      if (--count_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kUtf8:
      if (c < low_ || c > high_) return false;
      low_ = 0x80;
      high_ = 0xBF;
      if (--count_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kLiteral:
      if (c != static_cast<uint8_t>(kLiterals[literal_][count_])) return false;
      if (++count_ == kLiteralLengths[literal_]) EndValue();
      return true;
    case Mode::kNumber:
      return NumberByte(c);
    case Mode::kDone:
      return false;
    default:
      break;
  }
  // Between tokens.
  if (IsWhitespace(c)) return Whitespace();
  whitespace_run_ = 0;
  switch (mode_) {
    case Mode::kStart:
      return c == '{' && Open(true);
    case Mode::kObjectFirst:
      if (c == '}') return Close(true);
      return c == '"' && BeginString(true);
    case Mode::kObjectKey:
      return c == '"' && BeginString(true);
    case Mode::kColon:
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kValue:
      return BeginValue(c);
    case Mode::kArrayFirst:
      if (c == ']') return Close(false);
      return BeginValue(c);
    case Mode::kAfterValue:
      return AfterValue(c);
    default:
      return false;
  }
}

JsonStateKey JsonByteState::key() const {
  const bool in_string = mode_ == Mode::kString || mode_ == Mode::kEscape ||
                         mode_ == Mode::kUnicode || mode_ == Mode::kUtf8;
  const bool between_tokens = mode_ <= Mode::kAfterValue;
  const bool counting = mode_ == Mode::kUnicode || mode_ == Mode::kUtf8 || mode_ == Mode::kLiteral;
  JsonStateKey k;
  k.containers = depth_ == 64 ? containers_ : containers_ & ((uint64_t{1} << depth_) - 1);
  k.fields = static_cast<uint64_t>(mode_) | static_cast<uint64_t>(depth_) << 8 |
             (mode_ == Mode::kNumber ? static_cast<uint64_t>(number_) << 16 : 0) |
             (mode_ == Mode::kLiteral ? static_cast<uint64_t>(literal_) << 24 : 0) |
             (counting ? static_cast<uint64_t>(count_) << 32 : 0) |
             (mode_ == Mode::kUtf8 ? static_cast<uint64_t>(low_) << 40 : 0) |
             (mode_ == Mode::kUtf8 ? static_cast<uint64_t>(high_) << 48 : 0) |
             (between_tokens ? static_cast<uint64_t>(whitespace_run_) << 56 : 0) |
             (in_string && in_key_ ? uint64_t{1} << 63 : 0);
  return k;
}

bool JsonByteState::Whitespace() {
  if (whitespace_run_ >= kMaxJsonWhitespaceRun) return false;
  ++whitespace_run_;
  return true;
}

bool JsonByteState::BeginValue(uint8_t c) {
  switch (c) {
    case '{':
      return Open(true);
    case '[':
      return Open(false);
    case '"':
      return BeginString(false);
    case 't':
    case 'f':
    case 'n':
      mode_ = Mode::kLiteral;
      literal_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      count_ = 1;
      return true;
    case '-':
      mode_ = Mode::kNumber;
      number_ = Number::kMinus;
      return true;
    case '0':
      mode_ = Mode::kNumber;
      number_ = Number::kZero;
      return true;
    default:
      if (c < '1' || c > '9') return false;
      mode_ = Mode::kNumber;
      number_ = Number::kInteger;
      return true;
  }
}

bool JsonByteState::BeginString(bool key) {
  mode_ = Mode::kString;
  in_key_ = key;
  return true;
}

bool JsonByteState::StringByte(uint8_t c) {
  if (c == '"') {
    if (in_key_) {
      mode_ = Mode::kColon;
    } else {
      EndValue();
    }
    return true;
  }
  if (c == '\\') {
    mode_ = Mode::kEscape;
    return true;
  }
  if (c < 0x20) return false;  // raw control characters must be escaped
  if (c < 0x80) return true;
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
    return false;
  }
  mode_ = Mode::kUtf8;
  return true;
}

bool JsonByteState::Open(bool object) {
  if (depth_ >= kMaxJsonDepth) return false;
  if (object) {
    containers_ |= uint64_t{1} << depth_;
  } else {
    containers_ &= ~(uint64_t{1} << depth_);
  }
  ++depth_;
  mode_ = object ? Mode::kObjectFirst : Mode::kArrayFirst;
  return true;
}

bool JsonByteState::Close(bool object) {
  if (depth_ == 0 || top_is_object() != object) return false;
  --depth_;
  EndValue();
  return true;
}

void JsonByteState::EndValue() {
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfterValue;
  whitespace_run_ = 0;
}

bool JsonByteState::AfterValue(uint8_t c) {
  if (IsWhitespace(c)) return Whitespace();
  whitespace_run_ = 0;
  if (c == ',') {
    mode_ = top_is_object() ? Mode::kObjectKey : Mode::kValue;
    return true;
  }
  if (c == '}') return Close(true);
  if (c == ']') return Close(false);
  return false;
}

bool JsonByteState::NumberByte(uint8_t c) {
  const bool digit = IsDigit(c);
  const bool exponent = c == 'e' || c == 'E';
  switch (number_) {
    case Number::kMinus:
      if (!digit) return false;
      number_ = c == '0' ? Number::kZero : Number::kInteger;
      return true;
    case Number::kZero:
    case Number::kInteger:
      if (digit && number_ == Number::kInteger) return true;
      if (c == '.') {
        number_ = Number::kDot;
        return true;
      }
      if (exponent) {
        number_ = Number::kExponent;
        return true;
      }
      break;  // the number ends here (a digit after a leading 0 does not fit what follows)
    case Number::kDot:
      if (!digit) return false;
      number_ = Number::kFraction;
      return true;
    case Number::kFraction:
      if (digit) return true;
      if (exponent) {
        number_ = Number::kExponent;
        return true;
      }
      break;
    case Number::kExponent:
      if (c == '+' || c == '-') {
        number_ = Number::kSign;
        return true;
      }
      if (!digit) return false;
      number_ = Number::kExpDigits;
      return true;
    case Number::kSign:
      if (!digit) return false;
      number_ = Number::kExpDigits;
      return true;
    case Number::kExpDigits:
      if (digit) return true;
      break;
  }
  // A number is always inside a container (the top level is an object): `c` follows it.
  EndValue();
  return AfterValue(c);
}

}  // namespace ridge
