// libFuzzer target: a chat template's Jinja source (tokenizer/jinja/). Any source must parse or
// fail with an error naming the line and column; a parsed one must render a conversation with a
// tool call and a tool result within the interpreter's limits or fail cleanly, never crash or
// hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  ridge::ChatSpecialTokens special;
  special.bos_token = "<s>";
  special.eos_token = "</s>";
  const auto chat_template = ridge::ChatTemplate::FromSource("fuzz", source, special);
  if (!chat_template.ok()) return 0;
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}])");
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "weather", "description": "Weather of a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  ridge::ChatRenderInput input;
  input.messages = messages;
  (void)chat_template->Render(input);
  input.tools = tools;
  input.kwargs = {{"enable_thinking", false}};
  input.add_generation_prompt = false;
  (void)chat_template->Render(input);
  return 0;
}
