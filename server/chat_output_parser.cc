#include "server/chat_output_parser.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>

#include "absl/strings/ascii.h"
#include "base/json_nesting.h"
#include "nlohmann/json.hpp"
#include "tokenizer/jinja/value.h"

namespace ridge {
namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";

// The length of the longest suffix of `text` that is a proper prefix of `tag`: text that may
// become the tag when more arrives.
size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

bool AllSpace(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

std::string NewToolCallId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char hex[25];
  const uint64_t a = rng(), b = rng();
  std::snprintf(hex, sizeof(hex), "%016llx%08llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b & 0xffffffffULL));
  return std::string("chatcmpl-tool-") + hex;
}

// JSON a model wrote, or null when it is not JSON or nests too deep (a model can write any depth).
nlohmann::ordered_json ParseModelJson(const std::string& text) {
  if (JsonNestsDeeperThan(text, kMaxJsonInputNesting)) return nullptr;
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// A call as the model wrote it, {"name": "...", "arguments": {...} or "..."} (arguments may be
// left out: "{}"), or none when `call` is not one.
std::optional<ParsedToolCall> CallFrom(const nlohmann::ordered_json& call) {
  const bool valid = call.is_object() && call.contains("name") && call["name"].is_string() &&
                     (!call.contains("arguments") || call["arguments"].is_object() ||
                      call["arguments"].is_string());
  if (!valid) return std::nullopt;
  ParsedToolCall parsed;
  parsed.id = NewToolCallId();
  parsed.name = call["name"].get<std::string>();
  if (!call.contains("arguments")) {
    parsed.arguments = "{}";
  } else if (call["arguments"].is_string()) {
    parsed.arguments = call["arguments"].get<std::string>();
  } else {
    // json.dumps(arguments, ensure_ascii=False), as vLLM's Hermes parser writes them.
    parsed.arguments =
        jinja::ToJson(jinja::Value::FromJson(call["arguments"]), jinja::JsonDumpOptions())
            .value_or("{}");
  }
  return parsed;
}

}  // namespace

ChatDelta ChatOutputParser::Add(std::string_view text) {
  ChatDelta out;
  if (!options_.reasoning) {
    AddContent(text, /*final=*/false, &out);
    return out;
  }
  reasoning_buffer_.append(text);
  while (true) {
    if (reasoning_state_ == ReasoningState::kUndecided) {
      const std::string_view buffer = reasoning_buffer_;
      if (buffer.size() < kReasoningOpen.size() &&
          kReasoningOpen.substr(0, buffer.size()) == buffer) {
        return out;  // may still become "<think>"
      }
      if (buffer.substr(0, kReasoningOpen.size()) == kReasoningOpen) {
        reasoning_state_ = ReasoningState::kReasoning;
        reasoning_buffer_.erase(0, kReasoningOpen.size());
        continue;
      }
      reasoning_state_ = ReasoningState::kContent;
    }
    if (reasoning_state_ == ReasoningState::kReasoning) {
      const size_t close = reasoning_buffer_.find(kReasoningClose);
      if (close == std::string::npos) {
        const size_t hold = PartialTagSuffix(reasoning_buffer_, kReasoningClose);
        out.reasoning.append(reasoning_buffer_, 0, reasoning_buffer_.size() - hold);
        reasoning_buffer_.erase(0, reasoning_buffer_.size() - hold);
        return out;
      }
      out.reasoning.append(reasoning_buffer_, 0, close);
      reasoning_buffer_.erase(0, close + kReasoningClose.size());
      reasoning_state_ = ReasoningState::kContent;
    }
    // kContent
    const std::string rest = std::move(reasoning_buffer_);
    reasoning_buffer_.clear();
    AddContent(rest, /*final=*/false, &out);
    return out;
  }
}

ChatDelta ChatOutputParser::Finish() {
  ChatDelta out;
  if (reasoning_state_ == ReasoningState::kReasoning) {
    out.reasoning += reasoning_buffer_;  // generation stopped while thinking
  } else if (!reasoning_buffer_.empty()) {
    const std::string rest = std::move(reasoning_buffer_);
    AddContent(rest, /*final=*/false, &out);
  }
  reasoning_buffer_.clear();
  AddContent("", /*final=*/true, &out);
  return out;
}

void ChatOutputParser::AddContent(std::string_view text, bool final, ChatDelta* out) {
  if (!options_.tool_calls) {
    out->content.append(text);
    return;
  }
  tool_buffer_.append(text);
  if (whole_content_is_calls()) {
    if (final) EmitWholeContent(out);
    return;
  }
  while (true) {
    if (tool_state_ == ToolState::kText) {
      const size_t open = tool_buffer_.find(kCallOpen);
      if (open != std::string::npos) {
        EmitText(tool_buffer_.substr(0, open), out);
        tool_buffer_.erase(0, open + kCallOpen.size());
        tool_state_ = ToolState::kInCall;
        continue;
      }
      const size_t hold = final ? 0 : PartialTagSuffix(tool_buffer_, kCallOpen);
      EmitText(tool_buffer_.substr(0, tool_buffer_.size() - hold), out);
      tool_buffer_.erase(0, tool_buffer_.size() - hold);
      return;
    }
    const size_t close = tool_buffer_.find(kCallClose);
    if (close != std::string::npos) {
      EmitCall(tool_buffer_.substr(0, close), /*closed=*/true, out);
      tool_buffer_.erase(0, close + kCallClose.size());
      tool_state_ = ToolState::kText;
      continue;
    }
    if (final) {  // generation ended inside a call: parse what is there, as vLLM does
      EmitCall(tool_buffer_, /*closed=*/false, out);
      tool_buffer_.clear();
      tool_state_ = ToolState::kText;
    }
    return;
  }
}

void ChatOutputParser::EmitText(std::string text, ChatDelta* out) {
  if (tool_calls_emitted_ > 0 && AllSpace(text)) return;
  out->content += text;
}

void ChatOutputParser::EmitCall(const std::string& body, bool closed, ChatDelta* out) {
  std::optional<ParsedToolCall> call = CallFrom(ParseModelJson(body));
  if (!call) {  // not a call we understand: the client gets the text as the model wrote it
    EmitText(std::string(kCallOpen) + body + (closed ? std::string(kCallClose) : ""), out);
    return;
  }
  out->tool_calls.push_back(*std::move(call));
  ++tool_calls_emitted_;
}

void ChatOutputParser::EmitWholeContent(ChatDelta* out) {
  std::string text = std::move(tool_buffer_);
  tool_buffer_.clear();
  if (forced_call()) {  // the arguments, or (cut short by max_tokens or a stop string) content
    if (!ParseModelJson(text).is_object()) {
      out->content += text;
      return;
    }
    // Without the white space around it (after a reasoning model's "</think>", say).
    out->tool_calls.push_back(
        {NewToolCallId(), options_.forced_function, std::string(absl::StripAsciiWhitespace(text))});
    ++tool_calls_emitted_;
    return;
  }
  // Required calls: all of them, or (cut short, or not calls) none and the text as content.
  const nlohmann::ordered_json list = ParseModelJson(text);
  std::vector<ParsedToolCall> calls;
  for (const auto& item : list.is_array() ? list : nlohmann::ordered_json::array()) {
    std::optional<ParsedToolCall> call = CallFrom(item);
    if (!call) break;
    calls.push_back(*std::move(call));
  }
  if (calls.empty() || calls.size() != list.size()) {
    out->content += text;
    return;
  }
  tool_calls_emitted_ += static_cast<int>(calls.size());
  for (ParsedToolCall& call : calls) out->tool_calls.push_back(std::move(call));
}

}  // namespace ridge
