#include "server/tool_call_stream.h"

#include <cstdint>
#include <cstdio>
#include <random>

#include "nlohmann/json.hpp"

namespace ridge {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

std::string NewToolCallId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char hex[25];
  const uint64_t a = rng(), b = rng();
  std::snprintf(hex, sizeof(hex), "%016llx%08llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b & 0xffffffffULL));
  return std::string("chatcmpl-tool-") + hex;
}

void AppendArguments(std::vector<ToolCallPiece>& pieces, int index, std::string_view text) {
  if (text.empty()) return;
  if (pieces.empty() || pieces.back().index != index) pieces.push_back({.index = index});
  pieces.back().arguments.append(text);
}

void CallListStream::Add(std::string_view text, std::vector<ToolCallPiece>* out) {
  for (char c : text) Step(c, out);
}

void CallListStream::Arguments(std::string_view text, std::vector<ToolCallPiece>* out) {
  if (item_open_) {
    AppendArguments(*out, calls_ - 1, text);
  } else {
    held_arguments_.append(text);
  }
}

bool CallListStream::ClosesString(char c) {
  if (escaped_) {
    escaped_ = false;
  } else if (c == '\\') {
    escaped_ = true;
  } else if (c == '"') {
    in_string_ = false;
    return true;
  }
  return false;
}

bool CallListStream::StepArguments(char c, std::vector<ToolCallPiece>* out) {
  if (arguments_kind_ == ValueKind::kLiteral && (IsSpace(c) || c == ',' || c == '}' || c == ']')) {
    in_arguments_ = false;
    return false;
  }
  Arguments(std::string_view(&c, 1), out);
  if (in_string_) {
    if (ClosesString(c) && arguments_kind_ == ValueKind::kString) in_arguments_ = false;
    return true;
  }
  if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    if (--depth_ <= 2) in_arguments_ = false;
  }
  return true;
}

void CallListStream::StringEnded(std::vector<ToolCallPiece>* out) {
  if (depth_ != 2) return;  // a string in the list itself: not a call
  const nlohmann::json value = nlohmann::json::parse(string_, nullptr, /*allow_exceptions=*/false);
  const std::string text = value.is_string() ? value.get<std::string>() : std::string();
  if (expecting_key_) {
    key_ = text;
    return;
  }
  if (key_ != "name" || item_open_) return;
  out->push_back({.index = calls_, .id = NewToolCallId(), .name = text});
  ++calls_;
  item_open_ = true;
  Arguments(held_arguments_, out);
  held_arguments_.clear();
}

void CallListStream::Step(char c, std::vector<ToolCallPiece>* out) {
  if (in_arguments_ && StepArguments(c, out)) return;
  if (in_string_) {
    string_ += c;
    if (ClosesString(c)) StringEnded(out);
    return;
  }
  if (IsSpace(c)) return;
  if (awaiting_arguments_) {
    awaiting_arguments_ = false;
    in_arguments_ = true;
    item_has_arguments_ = true;
    arguments_kind_ = c == '{' || c == '[' ? ValueKind::kContainer
                      : c == '"'           ? ValueKind::kString
                                           : ValueKind::kLiteral;
    StepArguments(c, out);
    return;
  }
  switch (c) {
    case '"':
      in_string_ = true;
      string_.assign(1, '"');
      return;
    case '{':
    case '[':
      if (++depth_ == 2 && c == '{') {  // an item
        expecting_key_ = true;
        key_.clear();
        item_open_ = false;
        item_has_arguments_ = false;
        held_arguments_.clear();
      }
      return;
    case '}':
    case ']':
      if (depth_ == 2 && c == '}' && item_open_ && !item_has_arguments_) {
        AppendArguments(*out, calls_ - 1, "{}");
      }
      if (depth_ > 0) --depth_;
      return;
    case ':':
      if (depth_ == 2) {
        expecting_key_ = false;
        awaiting_arguments_ = key_ == "arguments";
      }
      return;
    case ',':
      if (depth_ == 2) expecting_key_ = true;
      return;
    default:  // a number or literal outside the arguments: not part of a call
      return;
  }
}

}  // namespace ridge
