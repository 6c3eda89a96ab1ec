// tokenizer_config.json, the transformers-side companion of tokenizer.json: names of the
// bos/eos/pad/unk tokens, add_bos_token / add_eos_token, and the chat template(s).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ridge {

struct NamedChatTemplate {
  std::string name;  // "default" for a template given as a plain string
  std::string source;
};

struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::vector<NamedChatTemplate> chat_templates;
};

// Parses the text of tokenizer_config.json; malformed JSON or fields are InvalidArgument.
absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view text);

}  // namespace ridge
