// libFuzzer target: tokenizer_config.json and the chat template in it. A config that parses must
// give a template that renders a short conversation or an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto config = ridge::ParseTokenizerConfig(text);
  if (!config.ok()) return 0;
  const auto chat_template = ridge::LoadChatTemplate(*config);
  if (!chat_template.ok()) return 0;
  ridge::ChatRenderInput input;
  input.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}])");
  (void)chat_template->Render(input);
  return 0;
}
