#include "tokenizer/chat_template.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/builtins.h"

namespace ridge {
namespace {

using OJson = nlohmann::ordered_json;

// transformers marks the end of the message to continue with this text, renders, and cuts the
// prompt where the mark lands.
constexpr std::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

// The names a message's reasoning may come under; templates read the first.
constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view Strip(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

absl::Status Invalid(const std::string& name, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("chat template '", name, "': ", message));
}

// A message as transformers hands it to the template: keys holding null dropped, reasoning
// under both "thinking" (first) and "reasoning_content".
OJson PrepareMessage(const OJson& message) {
  OJson out = OJson::object();
  const OJson* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    auto it = message.find(field);
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning != nullptr) out["thinking"] = *reasoning;
  for (auto it = message.begin(); it != message.end(); ++it) {
    if (it->is_null()) continue;
    out[it.key()] = it.key() == "thinking" && reasoning != nullptr ? *reasoning : it.value();
  }
  if (reasoning != nullptr) out["reasoning_content"] = *reasoning;
  return out;
}

}  // namespace

ChatSpecialTokens ChatSpecialTokens::FromConfig(const TokenizerConfig& config) {
  return {config.bos_token, config.eos_token, config.unk_token, config.pad_token};
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(std::string_view name,
                                                      std::string_view source,
                                                      ChatSpecialTokens special_tokens) {
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) {
    return Invalid(std::string(name),
                   absl::StrCat("cannot be loaded: ", std::string(parsed.status().message())));
  }
  ChatTemplate t;
  t.name_ = std::string(name);
  t.source_ = std::string(source);
  t.template_ = *std::move(parsed);
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatRenderInput& input,
                                                 std::optional<std::string>* continued) const {
  if (!input.messages.is_array() || input.messages.empty()) {
    return Invalid(name_, "cannot render an empty conversation; send at least one message");
  }
  if (input.continue_final_message && input.add_generation_prompt) {
    return Invalid(name_,
                   "continue_final_message and add_generation_prompt cannot both be true: one "
                   "continues the last message, the other starts a new assistant message");
  }
  if (!input.tools.is_null() && !input.tools.is_array()) {
    return Invalid(name_, "tools must be a list");
  }
  if (!input.kwargs.is_null() && !input.kwargs.is_object()) {
    return Invalid(name_, "chat_template_kwargs must be an object");
  }
  OJson messages = OJson::array();
  for (size_t i = 0; i < input.messages.size(); ++i) {
    if (!input.messages[i].is_object()) {
      return Invalid(name_, absl::StrCat("messages[", i, "] is not an object"));
    }
    messages.push_back(PrepareMessage(input.messages[i]));
  }
  std::string final_text;
  if (input.continue_final_message) {
    OJson& last = messages.back();
    auto content = last.find("content");
    if (content == last.end()) {
      return Invalid(name_, "continue_final_message is set but the final message has no content");
    }
    if (source_.find("content") == std::string::npos) {
      return Invalid(name_, "continue_final_message is set but the template reads no content");
    }
    OJson* text = nullptr;
    if (content->is_array()) {
      for (auto it = content->rbegin(); it != content->rend() && text == nullptr; ++it) {
        if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
          text = &(*it)["text"];
        }
      }
    } else if (content->is_string()) {
      text = &*content;
    }
    if (text == nullptr) {
      return Invalid(name_, "continue_final_message is set but the final message has no text");
    }
    final_text = text->get<std::string>();
    *text = final_text + std::string(kContinueTag);
  }

  auto context = std::make_shared<jinja::Object>();
  const std::pair<const char*, const std::optional<std::string>*> tokens[] = {
      {"bos_token", &special_tokens_.bos_token},
      {"eos_token", &special_tokens_.eos_token},
      {"unk_token", &special_tokens_.unk_token},
      {"pad_token", &special_tokens_.pad_token}};
  for (const auto& [key, value] : tokens) {
    if (value->has_value()) context->Set(key, jinja::Value(**value));
  }
  if (input.kwargs.is_object()) {
    for (auto it = input.kwargs.begin(); it != input.kwargs.end(); ++it) {
      const std::string& key = it.key();
      if (key == "messages" || key == "tools" || key == "documents" ||
          key == "add_generation_prompt") {
        return Invalid(name_, absl::StrCat("chat_template_kwargs must not set '", key,
                                           "'; use the request field of that name"));
      }
      context->Set(key, jinja::Value::FromJson(it.value()));
    }
  }
  context->Set("messages", jinja::Value::FromJson(messages));
  context->Set("tools",
               input.tools.is_array() ? jinja::Value::FromJson(input.tools) : jinja::Value::None());
  context->Set("documents", jinja::Value::None());
  context->Set("add_generation_prompt", jinja::Value(input.add_generation_prompt));
  if (input.now.has_value()) context->Set("strftime_now", jinja::StrftimeNow(input.now));

  absl::StatusOr<std::string> rendered = template_.Render(jinja::Value(std::move(context)));
  if (!rendered.ok()) return Invalid(name_, std::string(rendered.status().message()));
  if (!input.continue_final_message) return rendered;

  const std::string_view tag = Strip(kContinueTag);
  const std::string_view final_stripped = Strip(final_text);
  if (rendered->find(final_stripped) == std::string::npos ||
      rendered->find(tag) == std::string::npos) {
    return Invalid(name_,
                   "continue_final_message is set but the template does not reproduce the final "
                   "message");
  }
  const size_t tag_at = rendered->rfind(tag);
  if (rendered->compare(tag_at, kContinueTag.size(), kContinueTag) == 0) {
    rendered->resize(tag_at);
  } else {
    rendered->resize(tag_at);
    while (!rendered->empty() && IsSpace(rendered->back())) rendered->pop_back();
  }
  if (continued != nullptr) {
    // From the final message's first non-space byte to the end, as the template wrote it; none
    // when the template changed it (the prompt does not end with its text and spaces).
    const size_t text_at = rendered->rfind(final_stripped);
    if (final_stripped.empty()) {
      *continued = std::string();
    } else if (text_at != std::string::npos &&
               Strip(std::string_view(*rendered).substr(text_at)) == final_stripped) {
      *continued = rendered->substr(text_at);
    } else {
      *continued = std::nullopt;
    }
  }
  return rendered;
}

absl::StatusOr<ChatTemplate> LoadChatTemplate(const TokenizerConfig& config,
                                              std::string_view name) {
  for (const NamedChatTemplate& t : config.chat_templates) {
    if (t.name == name) {
      return ChatTemplate::FromSource(t.name, t.source, ChatSpecialTokens::FromConfig(config));
    }
  }
  return absl::NotFoundError(
      absl::StrCat("tokenizer_config.json has no chat template named '", std::string(name), "'"));
}

}  // namespace ridge
