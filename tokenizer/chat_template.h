// Chat templates: turning a conversation into the prompt a model was trained on.
//
// Checkpoints ship their template as Jinja source in tokenizer_config.json. ridgeserve runs it
// with its own Jinja interpreter (tokenizer/jinja/), the way transformers' apply_chat_template
// does: the same variables (messages, tools, documents, add_generation_prompt, the tokenizer's
// special tokens, and any chat_template_kwargs), the same message preparation (keys whose value is
// null dropped, reasoning copied under "reasoning_content" and "thinking"), the same
// continue_final_message cut. A template that uses anything the interpreter does not support
// fails in FromSource, so a server refuses it at start-up, never at request time.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizer/jinja/template.h"
#include "tokenizer/tokenizer_config.h"

namespace ridge {

// What one rendering gets besides the template. JSON null means "not given".
struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  nlohmann::ordered_json tools;                                       // null or a list of schemas
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // end the prompt inside the last message
  nlohmann::ordered_json kwargs;        // null or an object: extra template variables
  // The time the template's strftime_now formats (as local time); the wall clock when unset.
  std::optional<std::time_t> now;
};

// The tokenizer's special tokens, visible to templates as bos_token, eos_token, ...
struct ChatSpecialTokens {
  std::optional<std::string> bos_token, eos_token, unk_token, pad_token;
  static ChatSpecialTokens FromConfig(const TokenizerConfig& config);
};

class ChatTemplate {
 public:
  // Parses `source`; `name` names the template in errors ("default", a named template of
  // tokenizer_config.json, or a file). Unsupported constructs are InvalidArgument naming the
  // template, line and column.
  static absl::StatusOr<ChatTemplate> FromSource(std::string_view name, std::string_view source,
                                                 ChatSpecialTokens special_tokens = {});

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }

  // InvalidArgument for a conversation the template rejects (its raise_exception message), a
  // type error while rendering (with line and column), an empty conversation, or a
  // continue_final_message whose final message the template does not reproduce. With
  // continue_final_message, `continued` (if given) gets the final message's text as the prompt
  // ends with it, from its first non-space byte: what the output goes on from (none when the
  // template changed the text).
  absl::StatusOr<std::string> Render(const ChatRenderInput& input,
                                     std::optional<std::string>* continued = nullptr) const;

 private:
  ChatTemplate() = default;
  std::string name_;
  std::string source_;
  jinja::Template template_;
  ChatSpecialTokens special_tokens_;
};

// The template called `name` in tokenizer_config.json ("default" when it has a single one), with
// the config's special tokens; NotFound when the config has none by that name.
absl::StatusOr<ChatTemplate> LoadChatTemplate(const TokenizerConfig& config,
                                              std::string_view name = "default");

}  // namespace ridge
