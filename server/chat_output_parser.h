// Splits a chat completion's generated text, as it streams, into what OpenAI clients expect:
// reasoning ("<think>...</think>", Qwen3 / vLLM's `--reasoning-parser qwen3`) into
// reasoning_content, tool calls ("<tool_call>{"name": ..., "arguments": ...}</tool_call>", the
// Hermes format Qwen writes) into tool_calls with ids, and the rest into content. Tags split
// across deltas are held back until they can be recognised. The same object serves unary replies
// (Add the whole text, then Finish), so streamed and unary results agree.
//
// Reasoning: only when the output starts with "<think>"; it runs to "</think>" (or to the end when
// generation stops inside it). The tags are dropped; the text after "</think>" is content, as
// vLLM leaves it.
// Tool calls: each complete block whose JSON is an object with a string "name" becomes a call
// (arguments: the object or string given, as JSON text), in one piece when its block closes; a
// block that is not valid JSON is returned as plain content, tags included, never an error.
// Whitespace-only text between and after calls is dropped. With a forced function (a named
// tool_choice, whose output is constrained to its arguments) the whole content is one call's
// arguments, as vLLM gives them; with required calls (tool_choice "required") it is a JSON list
// of calls. Those calls stream as they are generated, as OpenAI and vLLM stream them: a call's
// first piece names it as soon as its name is complete, every later piece carries more of its
// arguments' text (as generated, white space included, none around it); a call cut short
// (max_tokens, a stop string) keeps the arguments it has. A required list cut short before any
// call was named is content, as the text it is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_stream.h"

namespace ridge {

// The tags around a Qwen3 reply's reasoning (single special tokens in its vocabulary).
inline constexpr std::string_view kReasoningOpen = "<think>";
inline constexpr std::string_view kReasoningClose = "</think>";

struct ChatDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallPiece> tool_calls;  // in order; a call's pieces after its opening one
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

// Appends `more` to `all` with each call's pieces joined: all.tool_calls then holds whole calls
// (so far), one per index.
void AppendChatDelta(ChatDelta& all, ChatDelta more);

class ChatOutputParser {
 public:
  struct Options {
    bool reasoning = false;   // --reasoning-parser qwen3
    bool tool_calls = false;  // the request has tools and tool_choice is not "none"
    // A named tool_choice: the content is that function's arguments (the output was constrained
    // to them), one call streamed as they come.
    std::string forced_function = {};
    // tool_choice "required": the content is a list of {"name", "arguments"} calls (the output
    // was constrained to one), each streamed as it comes.
    bool required_calls = false;
  };
  explicit ChatOutputParser(Options options) : options_(options) {}

  ChatDelta Add(std::string_view text);
  ChatDelta Finish();  // releases held-back text at the end of generation

  int tool_calls_emitted() const { return tool_calls_emitted_; }
  bool forced_call() const { return !options_.forced_function.empty(); }

 private:
  enum class ReasoningState { kUndecided, kReasoning, kContent };
  enum class ToolState { kText, kInCall };

  void AddContent(std::string_view text, bool final, ChatDelta* out);
  void EmitText(std::string text, ChatDelta* out);
  void EmitCall(const std::string& body, bool closed, ChatDelta* out);
  void AddForcedArguments(std::string_view text, bool final, ChatDelta* out);
  void AddRequiredCalls(std::string_view text, bool final, ChatDelta* out);

  Options options_;
  ReasoningState reasoning_state_ = ReasoningState::kUndecided;
  std::string reasoning_buffer_;  // undecided start, or a possible "</think>" prefix
  ToolState tool_state_ = ToolState::kText;
  // A possible "<tool_call>" prefix or a call's body; with required calls, all the text so far.
  std::string tool_buffer_;
  std::string held_space_;  // a forced call's white space not yet known to be inside it
  CallListStream call_list_;
  int tool_calls_emitted_ = 0;
};

}  // namespace ridge
