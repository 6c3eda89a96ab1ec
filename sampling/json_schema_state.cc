// JsonSchemaState: the byte automaton of a compiled JsonSchema (sampling/json_schema.h).
#include <bit>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "sampling/json_grammar.h"
#include "sampling/json_schema.h"

namespace ridge {
namespace {

using Kind = JsonSchema::Kind;

// The literals of `candidates` whose byte at `offset` is `c`.
uint64_t Match(const std::vector<std::string>& literals, uint64_t candidates, size_t offset,
               uint8_t c) {
  uint64_t next = 0;
  for (uint64_t rest = candidates; rest != 0; rest &= rest - 1) {
    const int i = std::countr_zero(rest);
    const std::string& l = literals[i];
    if (l.size() > offset && static_cast<uint8_t>(l[offset]) == c) next |= uint64_t{1} << i;
  }
  return next;
}

// Whether one of `candidates` is `offset` bytes long (read whole), and whether one is longer.
void Lengths(const std::vector<std::string>& literals, uint64_t candidates, size_t offset,
             bool* whole, bool* longer) {
  *whole = *longer = false;
  for (uint64_t rest = candidates; rest != 0; rest &= rest - 1) {
    const size_t size = literals[std::countr_zero(rest)].size();
    *whole = *whole || size == offset;
    *longer = *longer || size > offset;
  }
}

// Where alternative `a` of object union `u` is, the union's frame having read the name
// index - 1 last (none when index is 0): the position after that name in its own properties.
size_t UnionPosition(const JsonSchema::Node& u, int a, uint16_t index) {
  const size_t begin = u.member_begin[a], end = u.member_begin[a + 1];
  if (index == 0) return 0;
  for (size_t k = begin; k < end; ++k) {
    if (u.member_names[k] == index - 1) return k - begin + 1;
  }
  return end - begin;  // not one of its names: it is no longer alive
}

}  // namespace

absl::Status JsonSchema::CheckSpelling(const JsonVocabulary& vocabulary) const {
  for (const Node& node : nodes_) {
    for (const std::string& literal : node.literals) {
      for (const char c : literal) {
        const auto byte = static_cast<uint8_t>(c);
        if (vocabulary.HasTokenForByte(byte)) continue;
        return absl::FailedPreconditionError(absl::StrFormat(
            "the schema's %s %s needs the byte 0x%02X, which no token of this tokenizer is "
            "alone, so the output could stall there (with this model, use ASCII in names and "
            "values)",
            node.kind == Kind::kObject || node.kind == Kind::kObjectUnion ? "property name"
                                                                          : "value",
            literal, byte));
      }
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<const TokenBits> JsonSchema::AllowedBits(const JsonVocabulary& vocabulary,
                                                         const JsonSchemaState& state) const {
  return masks_.Get(MaskKey{vocabulary.serial(), state.key()},
                    [&] { return std::make_shared<const TokenBits>(vocabulary.Mask(state)); });
}

bool JsonSchemaState::Step(uint8_t c) {
  switch (mode_) {
    case Mode::kString:
      return StepScalar(string_, c, [&] {
        EndValue();
        return true;
      });
    case Mode::kNumber:
      return StepScalar(number_, c, [&] {
        EndValue();  // a number is always inside a container: `c` follows it
        return BetweenTokens(c);
      });
    case Mode::kKey:
      return KeyByte(c);
    case Mode::kLiteral:
      return LiteralByte(c);
    case Mode::kDone:
      return false;
    default:
      return BetweenTokens(c);
  }
}

JsonSchemaState JsonSchemaState::key() const {
  JsonSchemaState k(schema_);
  k.mode_ = mode_;
  k.depth_ = depth_;
  for (int i = 0; i < depth_; ++i) k.frames_[i] = frames_[i];
  const bool between_tokens = mode_ <= Mode::kColon;
  if (between_tokens) k.whitespace_run_ = whitespace_run_;
  if (mode_ == Mode::kValue || mode_ == Mode::kColon || mode_ == Mode::kLiteral) k.value_ = value_;
  if (mode_ == Mode::kKey || mode_ == Mode::kLiteral) {
    k.offset_ = offset_;
    k.candidates_ = candidates_;
  }
  if (mode_ == Mode::kString) k.string_ = string_;
  if (mode_ == Mode::kNumber) k.number_ = number_;
  return k;
}

bool JsonSchemaState::BetweenTokens(uint8_t c) {
  if (IsJsonWhitespace(c)) {
    if (whitespace_run_ >= kMaxJsonWhitespaceRun) return false;
    ++whitespace_run_;
    return true;
  }
  whitespace_run_ = 0;
  switch (mode_) {
    case Mode::kStart:
      return BeginValue(0, c);
    case Mode::kValue:
      return BeginValue(value_, c);
    case Mode::kColon:
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kObject:
      return ObjectByte(c);
    case Mode::kArray:
      return ArrayByte(c);
    default:
      return false;
  }
}

bool JsonSchemaState::Fits(int32_t node) const {
  return depth_ + schema_->node(node).min_depth <= kMaxSchemaDepth;
}

bool JsonSchemaState::BeginValue(int32_t node, uint8_t c) {
  const JsonSchema::Node& n = schema_->node(node);
  if (n.kind != Kind::kAnyOf) return Fits(node) && Begin(node, c);
  // The alternatives differ in their first byte (the compiler saw to it): one at most begins.
  for (int32_t leaf : n.children) {
    if (Fits(leaf) && Begin(leaf, c)) return true;
  }
  return false;
}

bool JsonSchemaState::Begin(int32_t leaf, uint8_t c) {
  const JsonSchema::Node& n = schema_->node(leaf);
  switch (n.kind) {
    case Kind::kObject:
    case Kind::kArray:
      if (c != (n.kind == Kind::kObject ? '{' : '[')) return false;
      frames_[depth_++] = Frame{.node = static_cast<uint16_t>(leaf)};
      mode_ = n.kind == Kind::kObject ? Mode::kObject : Mode::kArray;
      return true;
    case Kind::kString:
      if (c != '"') return false;
      mode_ = Mode::kString;
      string_ = JsonStringLexer();
      return true;
    case Kind::kNumber:
    case Kind::kInteger:
      if (c != '-' && !IsJsonDigit(c)) return false;
      mode_ = Mode::kNumber;
      number_ = JsonNumberLexer(c, n.kind == Kind::kInteger, /*bounded=*/true);
      return true;
    case Kind::kObjectUnion: {
      if (c != '{') return false;
      Frame f{.node = static_cast<uint16_t>(leaf)};
      for (size_t a = 0; a < n.children.size(); ++a) {
        if (Fits(n.children[a])) f.alive |= static_cast<uint16_t>(1u << a);
      }
      frames_[depth_++] = f;
      mode_ = Mode::kObject;
      return true;
    }
    case Kind::kLiterals: {
      uint64_t all =
          n.literals.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << n.literals.size()) - 1;
      if (!n.allowed_by.empty()) {  // a union's name: only the values of its alive alternatives
        const uint16_t alive = frames_[depth_ - 1].alive;
        for (size_t i = 0; i < n.allowed_by.size(); ++i) {
          if ((n.allowed_by[i] & alive) == 0) all &= ~(uint64_t{1} << i);
        }
      }
      const uint64_t first = Match(n.literals, all, 0, c);
      if (first == 0) return false;
      mode_ = Mode::kLiteral;
      value_ = static_cast<uint16_t>(leaf);
      candidates_ = first;
      offset_ = 1;
      bool whole, longer;
      Lengths(n.literals, candidates_, offset_, &whole, &longer);
      if (whole && !longer) EndLiteral();
      return true;
    }
    case Kind::kAnyOf:
      break;
  }
  return false;
}

uint64_t JsonSchemaState::KeyCandidates() const {
  const Frame& f = frames_[depth_ - 1];
  const JsonSchema::Node& n = schema_->node(f.node);
  uint64_t candidates = 0;
  if (n.kind == Kind::kObjectUnion) {
    for (uint32_t rest = f.alive; rest != 0; rest &= rest - 1) {
      candidates |= UnionNext(f, std::countr_zero(rest));
    }
    return candidates;
  }
  for (size_t i = f.index; i < n.children.size(); ++i) {
    if (Fits(n.children[i])) candidates |= uint64_t{1} << i;
    if ((n.required >> i) & 1u) break;  // a required property cannot be skipped
  }
  return candidates;
}

uint64_t JsonSchemaState::UnionNext(const Frame& f, int a) const {
  const JsonSchema::Node& u = schema_->node(f.node);
  const JsonSchema::Node& alternative = schema_->node(u.children[a]);
  uint64_t next = 0;
  const size_t begin = u.member_begin[a], count = u.member_begin[a + 1] - begin;
  for (size_t k = UnionPosition(u, a, f.index); k < count; ++k) {
    if (Fits(alternative.children[k])) next |= uint64_t{1} << u.member_names[begin + k];
    if ((alternative.required >> k) & 1u) break;
  }
  return next;
}

bool JsonSchemaState::CanClose(const Frame& f) const {
  const JsonSchema::Node& n = schema_->node(f.node);
  if (n.kind != Kind::kObjectUnion) return (f.index >= 64 ? 0 : n.required >> f.index) == 0;
  for (uint32_t rest = f.alive; rest != 0; rest &= rest - 1) {
    const int a = std::countr_zero(rest);
    const size_t at = UnionPosition(n, a, f.index);
    if ((at >= 64 ? 0 : schema_->node(n.children[a]).required >> at) == 0) return true;
  }
  return false;
}

bool JsonSchemaState::ObjectByte(uint8_t c) {
  Frame& f = frames_[depth_ - 1];
  if (c == '}') {
    if (f.phase == kAfterComma || !CanClose(f)) return false;
    --depth_;
    EndValue();
    return true;
  }
  if (c == ',') {
    if (f.phase != kAfterValue || KeyCandidates() == 0) return false;
    f.phase = kAfterComma;
    return true;
  }
  if (c != '"' || f.phase == kAfterValue) return false;
  candidates_ = KeyCandidates();
  if (candidates_ == 0) return false;
  mode_ = Mode::kKey;
  offset_ = 1;  // every name begins with its quote
  return true;
}

bool JsonSchemaState::KeyByte(uint8_t c) {
  Frame& f = frames_[depth_ - 1];
  const JsonSchema::Node& n = schema_->node(f.node);
  candidates_ = Match(n.literals, candidates_, offset_, c);
  if (candidates_ == 0) return false;
  ++offset_;
  bool whole, longer;
  Lengths(n.literals, candidates_, offset_, &whole, &longer);
  if (whole) {  // a name's closing quote: no other name goes on from here
    const int i = std::countr_zero(candidates_);
    if (n.kind == Kind::kObjectUnion) {
      uint16_t alive = 0;  // the alternatives that may write this name here
      for (uint32_t rest = f.alive; rest != 0; rest &= rest - 1) {
        const int a = std::countr_zero(rest);
        if ((UnionNext(f, a) >> i) & 1u) alive |= static_cast<uint16_t>(1u << a);
      }
      f.alive = alive;
      int32_t value = n.name_values[i];
      if (value == JsonSchema::kDecidedValue) {  // one alternative is alive: its own value
        const int a = std::countr_zero(static_cast<uint32_t>(alive));
        value = schema_->node(n.children[a]).children[UnionPosition(n, a, i + 1) - 1];
      }
      value_ = static_cast<uint16_t>(value);
    } else {
      value_ = static_cast<uint16_t>(n.children[i]);
    }
    f.index = static_cast<uint16_t>(i + 1);
    mode_ = Mode::kColon;
  }
  return true;
}

bool JsonSchemaState::LiteralByte(uint8_t c) {
  const JsonSchema::Node& n = schema_->node(value_);
  const uint64_t next = Match(n.literals, candidates_, offset_, c);
  bool whole, longer;
  if (next == 0) {
    // A number (12 among 1, 12 and 123) ends when the next byte goes on with none.
    Lengths(n.literals, candidates_, offset_, &whole, &longer);
    if (!whole) return false;
    EndLiteral();
    return BetweenTokens(c);
  }
  candidates_ = next;
  ++offset_;
  Lengths(n.literals, candidates_, offset_, &whole, &longer);
  if (whole && !longer) EndLiteral();
  return true;
}

// The value of node value_ read whole (offset_ bytes, among candidates_): as EndValue, and the
// value of a union's name keeps alive only the alternatives that allow it.
void JsonSchemaState::EndLiteral() {
  const JsonSchema::Node& n = schema_->node(value_);
  if (!n.allowed_by.empty()) {
    for (uint64_t rest = candidates_; rest != 0; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      if (n.literals[i].size() == offset_) frames_[depth_ - 1].alive &= n.allowed_by[i];
    }
  }
  EndValue();
}

bool JsonSchemaState::ArrayByte(uint8_t c) {
  Frame& f = frames_[depth_ - 1];
  const JsonSchema::Node& n = schema_->node(f.node);
  const int32_t items = n.children[0];
  if (c == ']') {
    if (f.index < n.min_items) return false;
    --depth_;
    EndValue();
    return true;
  }
  if (f.phase == kAfterValue) {
    if (c != ',' || (n.max_items >= 0 && f.index >= n.max_items) || !Fits(items)) return false;
    f.phase = kAfterComma;
    value_ = static_cast<uint16_t>(items);
    mode_ = Mode::kValue;
    return true;
  }
  if (n.max_items == 0) return false;
  return BeginValue(items, c);
}

void JsonSchemaState::EndValue() {
  whitespace_run_ = 0;
  if (depth_ == 0) {
    mode_ = Mode::kDone;
    return;
  }
  Frame& f = frames_[depth_ - 1];
  f.phase = kAfterValue;
  const JsonSchema::Node& n = schema_->node(f.node);
  if (n.kind == Kind::kArray) {
    // Counted only as far as the bounds tell apart, so that states differ no more than futures.
    const int32_t enough = std::max(n.min_items, n.max_items);
    if (f.index < enough) ++f.index;
    mode_ = Mode::kArray;
  } else {
    mode_ = Mode::kObject;
  }
}

}  // namespace ridge
