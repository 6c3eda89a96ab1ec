// The chat-specific fields of POST /v1/chat/completions: messages (with tool calls, tool results
// and reasoning), tools, tool_choice, and the chat-template switches vLLM accepts
// (chat_template_kwargs, add_generation_prompt, continue_final_message). Everything is checked
// here, before the template sees it; a problem is an InvalidArgument naming the field.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"

namespace ridge {

struct ToolChoice {
  // kNamed: the output is that function's arguments; kRequired: a list of calls to the tools.
  enum class Mode { kAuto, kNone, kNamed, kRequired };
  Mode mode = Mode::kAuto;
  std::string function;  // kNamed: the function the client asks for
};

struct ChatFields {
  ChatRenderInput render;  // messages as the template sees them, tools, switches
  ToolChoice tool_choice;
  bool has_tools = false;           // tools were given (non-empty)
  bool parallel_tool_calls = true;  // false: tool_choice "required" writes one call
};

absl::Status ReadChatFields(const nlohmann::ordered_json& body, ChatFields* out);

}  // namespace ridge
