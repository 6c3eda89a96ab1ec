// Chat templates: turning a conversation into the prompt a model was trained on.
//
// Checkpoints ship their template as Jinja source in tokenizer_config.json. Rather than embed a
// Jinja interpreter, ridgeserve recognises the template by its content (after removing layout
// that cannot change the output) and renders the matching known format in C++. A template that
// matches no known format is an error naming it: using a wrong template would silently degrade
// every answer. To support a new format, add one entry to the table in chat_template.cc: a
// recogniser and a render function.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer_config.h"

namespace ridge {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// Values a known format reads out of the template source, such as a built-in system prompt.
struct ChatTemplateParams {
  std::string default_system_prompt;  // empty: the format adds none
};

class ChatTemplate {
 public:
  // Recognises `source`; `name` is the template's name in tokenizer_config.json ("default" when
  // the file has a single template), used in error messages.
  static absl::StatusOr<ChatTemplate> FromSource(std::string_view name, std::string_view source);

  const std::string& name() const { return name_; }
  // The known format the source was recognised as, e.g. "chatml".
  std::string_view format() const;

  absl::StatusOr<std::string> Apply(std::span<const ChatMessage> messages,
                                    bool add_generation_prompt) const;

 private:
  ChatTemplate() = default;
  std::string name_;
  int format_index_ = -1;
  ChatTemplateParams params_;
};

// The template called `name` in tokenizer_config.json ("default" when it has a single one);
// NotFound when the config has none by that name.
absl::StatusOr<ChatTemplate> LoadChatTemplate(const TokenizerConfig& config,
                                              std::string_view name = "default");

absl::StatusOr<std::string> ApplyChatTemplate(const ChatTemplate& chat_template,
                                              std::span<const ChatMessage> messages,
                                              bool add_generation_prompt);

// The template with what cannot change its output removed: whitespace inside tags outside
// string literals, whitespace that Jinja's trim_blocks / lstrip_blocks / "-" controls drop, and
// comments; double-quoted literals become single-quoted. Exposed for tests.
std::string CanonicalTemplateSource(std::string_view source);

}  // namespace ridge
