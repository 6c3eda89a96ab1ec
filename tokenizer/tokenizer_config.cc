#include "tokenizer/tokenizer_config.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/json_fields.h"

namespace ridge {
namespace {

constexpr char kWhere[] = "tokenizer_config.json";

// Token names are a string, null, or a serialized AddedToken object {"content": ...}.
absl::StatusOr<std::optional<std::string>> TokenName(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    ASSIGN_OR_RETURN(std::string content, GetString(*it, kWhere, "content"));
    return content;
  }
  return FieldError(kWhere, key, "a token");
}

absl::StatusOr<std::optional<bool>> OptionalBool(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return FieldError(kWhere, key, "a boolean");
  return it->get<bool>();
}

}  // namespace

absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view text) {
  const Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " is not a JSON object"));
  }
  TokenizerConfig out;
  ASSIGN_OR_RETURN(out.bos_token, TokenName(config, "bos_token"));
  ASSIGN_OR_RETURN(out.eos_token, TokenName(config, "eos_token"));
  ASSIGN_OR_RETURN(out.pad_token, TokenName(config, "pad_token"));
  ASSIGN_OR_RETURN(out.unk_token, TokenName(config, "unk_token"));
  ASSIGN_OR_RETURN(out.add_bos_token, OptionalBool(config, "add_bos_token"));
  ASSIGN_OR_RETURN(out.add_eos_token, OptionalBool(config, "add_eos_token"));
  auto tmpl = config.find("chat_template");
  if (tmpl != config.end() && !tmpl->is_null()) {
    if (tmpl->is_string()) {
      out.chat_templates.push_back({"default", tmpl->get<std::string>()});
    } else if (tmpl->is_array()) {
      // Several named templates: [{"name": "default", "template": "..."}, ...].
      for (const Json& item : *tmpl) {
        if (!item.is_object()) return FieldError(kWhere, "chat_template", "a list of objects");
        ASSIGN_OR_RETURN(std::string name, GetString(item, kWhere, "name"));
        ASSIGN_OR_RETURN(std::string source, GetString(item, kWhere, "template"));
        out.chat_templates.push_back({std::move(name), std::move(source)});
      }
    } else {
      return FieldError(kWhere, "chat_template", "a string or a list");
    }
  }
  return out;
}

}  // namespace ridge
