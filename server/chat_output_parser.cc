#include "server/chat_output_parser.h"

#include <algorithm>
#include <optional>

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

// JSON's white space, which is also what the parser drops between and around calls.
constexpr char kSpace[] = " \t\r\n";

bool AllSpace(std::string_view s) { return s.find_first_not_of(kSpace) == std::string_view::npos; }

// JSON a model wrote, or null when it is not JSON or nests too deep (a model can write any depth).
nlohmann::ordered_json ParseModelJson(const std::string& text) {
  if (JsonNestsDeeperThan(text, kMaxJsonInputNesting)) return nullptr;
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// A call as the model wrote it, {"name": "...", "arguments": {...} or "..."} (arguments may be
// left out: "{}"), or none when `call` is not one.
std::optional<ToolCallPiece> CallFrom(const nlohmann::ordered_json& call) {
  const bool valid = call.is_object() && call.contains("name") && call["name"].is_string() &&
                     (!call.contains("arguments") || call["arguments"].is_object() ||
                      call["arguments"].is_string());
  if (!valid) return std::nullopt;
  ToolCallPiece parsed;
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

void AppendChatDelta(ChatDelta& all, ChatDelta more) {
  all.content += more.content;
  all.reasoning += more.reasoning;
  for (ToolCallPiece& piece : more.tool_calls) {
    if (piece.opens_call()) {
      all.tool_calls.push_back(std::move(piece));
      continue;
    }
    for (ToolCallPiece& call : all.tool_calls) {
      if (call.index == piece.index) call.arguments += piece.arguments;
    }
  }
}

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
  if (forced_call()) {
    AddForcedArguments(text, final, out);
    return;
  }
  if (options_.required_calls) {
    AddRequiredCalls(text, final, out);
    return;
  }
  tool_buffer_.append(text);
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
  std::optional<ToolCallPiece> call = CallFrom(ParseModelJson(body));
  if (!call) {  // not a call we understand: the client gets the text as the model wrote it
    EmitText(std::string(kCallOpen) + body + (closed ? std::string(kCallClose) : ""), out);
    return;
  }
  call->index = tool_calls_emitted_;
  out->tool_calls.push_back(*std::move(call));
  ++tool_calls_emitted_;
}

// White space before the arguments is dropped, and a run of it is held back until more follows
// (white space after them is dropped too: after a reasoning model's "</think>", say).
void ChatOutputParser::AddForcedArguments(std::string_view text, bool final, ChatDelta* out) {
  if (final) {
    held_space_.clear();
    return;
  }
  std::string pending = std::move(held_space_);
  held_space_.clear();
  pending.append(text);
  if (tool_calls_emitted_ == 0) {
    const size_t first = pending.find_first_not_of(kSpace);
    pending.erase(0, first == std::string::npos ? pending.size() : first);
  }
  const size_t last = pending.find_last_not_of(kSpace);
  if (last == std::string::npos) {
    held_space_ = std::move(pending);
    return;
  }
  held_space_ = pending.substr(last + 1);
  pending.resize(last + 1);
  if (tool_calls_emitted_ == 0) {
    out->tool_calls.push_back(
        {.index = 0, .id = NewToolCallId(), .name = options_.forced_function});
    ++tool_calls_emitted_;
  }
  AppendArguments(out->tool_calls, 0, pending);
}

// The calls as the list streams; a list that named no call by its end is content.
void ChatOutputParser::AddRequiredCalls(std::string_view text, bool final, ChatDelta* out) {
  if (call_list_.calls() == 0) tool_buffer_.append(text);
  call_list_.Add(text, &out->tool_calls);
  tool_calls_emitted_ = call_list_.calls();
  if (tool_calls_emitted_ > 0) {
    tool_buffer_.clear();
  } else if (final) {
    out->content += tool_buffer_;
    tool_buffer_.clear();
  }
}

}  // namespace ridge
