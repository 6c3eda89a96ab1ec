#include "sampling/json_grammar.h"

namespace ridge {
namespace {

constexpr const char* kLiterals[] = {"true", "false", "null"};
constexpr uint8_t kLiteralLengths[] = {4, 5, 4};

}  // namespace

bool JsonByteState::Step(uint8_t c) {
  switch (mode_) {
    case Mode::kString:
      return StepScalar(string_, c, [&] {
        if (in_key_) {
          mode_ = Mode::kColon;
        } else {
          EndValue();
        }
        return true;
      });
    case Mode::kLiteral:
      if (c != static_cast<uint8_t>(kLiterals[literal_][count_])) return false;
      if (++count_ == kLiteralLengths[literal_]) EndValue();
      return true;
    case Mode::kNumber:
      return StepScalar(number_, c, [&] {
        // A number is always inside a container (the top level is an object): `c` follows it.
        EndValue();
        return AfterValue(c);
      });
    case Mode::kDone:
      return false;
    default:
      break;
  }
  // Between tokens.
  if (IsJsonWhitespace(c)) return Whitespace();
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
  const bool between_tokens = mode_ <= Mode::kAfterValue;
  JsonStateKey k;
  k.containers = depth_ == 64 ? containers_ : containers_ & ((uint64_t{1} << depth_) - 1);
  k.fields = static_cast<uint64_t>(mode_) | static_cast<uint64_t>(depth_) << 8 |
             (mode_ == Mode::kLiteral
                  ? static_cast<uint64_t>(literal_) << 16 | static_cast<uint64_t>(count_) << 24
                  : 0) |
             (mode_ == Mode::kNumber ? static_cast<uint64_t>(number_.key()) << 16 : 0) |
             (mode_ == Mode::kString ? static_cast<uint64_t>(string_.key()) << 16 |
                                           static_cast<uint64_t>(in_key_) << 48
                                     : 0) |
             (between_tokens ? static_cast<uint64_t>(whitespace_run_) << 56 : 0);
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
    default:
      if (c != '-' && !IsJsonDigit(c)) return false;
      mode_ = Mode::kNumber;
      number_ = JsonNumberLexer(c, /*integer=*/false);
      return true;
  }
}

bool JsonByteState::BeginString(bool key) {
  mode_ = Mode::kString;
  string_ = JsonStringLexer();
  in_key_ = key;
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
  if (IsJsonWhitespace(c)) return Whitespace();
  whitespace_run_ = 0;
  if (c == ',') {
    mode_ = top_is_object() ? Mode::kObjectKey : Mode::kValue;
    return true;
  }
  if (c == '}') return Close(true);
  if (c == ']') return Close(false);
  return false;
}

}  // namespace ridge
