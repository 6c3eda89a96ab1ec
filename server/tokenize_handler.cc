#include "server/tokenize_handler.h"

#include "absl/strings/str_cat.h"
#include "base/json_nesting.h"
#include "base/status_macros.h"
#include "server/api_error.h"
#include "server/chat_request.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

absl::StatusOr<json> ParseBody(const TokenizeContext& context, const std::string& body) {
  RETURN_IF_ERROR(CheckJsonNesting(body, kMaxJsonInputNesting, "the request body"));
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  if (context.tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        "this server has no tokenizer (start it with --tokenizer DIR)");
  }
  if (auto model = parsed.find("model"); model != parsed.end() && !model->is_null()) {
    if (!model->is_string() || model->get<std::string>() != context.model_id) {
      return WithParam(absl::NotFoundError(absl::StrCat("the model ", model->dump(),
                                                        " does not exist; this server serves '",
                                                        context.model_id, "'")),
                       "model");
    }
  }
  return parsed;
}

absl::Status ReadBool(const json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return FieldError(key, "must be true or false");
  *out = it->get<bool>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> TokenizeRequest(const TokenizeContext& context, const std::string& body) {
  ASSIGN_OR_RETURN(const json request, ParseBody(context, body));
  const bool chat = request.contains("messages");
  std::string text;
  bool add_special_tokens = !chat;  // the template writes its own special tokens
  if (chat) {
    if (context.chat_template == nullptr) {
      return FieldError("messages", "cannot be used: this server has no chat template");
    }
    ChatFields fields;
    RETURN_IF_ERROR(ReadChatFields(request, &fields));
    auto rendered = context.chat_template->Render(fields.render);
    if (!rendered.ok()) return WithParam(rendered.status(), "messages");
    text = *std::move(rendered);
  } else {
    auto prompt = request.find("prompt");
    if (prompt == request.end() || !prompt->is_string()) {
      return FieldError("prompt", "must be a string (or send \"messages\" for a chat prompt)");
    }
    text = prompt->get<std::string>();
  }
  RETURN_IF_ERROR(ReadBool(request, "add_special_tokens", &add_special_tokens));
  bool token_strs = false;
  RETURN_IF_ERROR(ReadBool(request, "return_token_strs", &token_strs));
  auto ids = context.tokenizer->Encode(text, add_special_tokens);
  if (!ids.ok()) return WithParam(ids.status(), chat ? "messages" : "prompt");
  json out = {{"count", ids->size()},
              {"max_model_len", context.max_model_len},
              {"tokens", *ids},
              {"token_strs", nullptr}};
  if (token_strs) {
    json strs = json::array();
    for (int32_t id : *ids) {
      const auto token = context.tokenizer->IdToToken(id);
      strs.push_back(token ? std::string(*token) : std::string());
    }
    out["token_strs"] = std::move(strs);
  }
  return out;
}

absl::StatusOr<json> DetokenizeRequest(const TokenizeContext& context, const std::string& body) {
  ASSIGN_OR_RETURN(const json request, ParseBody(context, body));
  auto tokens = request.find("tokens");
  if (tokens == request.end() || !tokens->is_array()) {
    return FieldError("tokens", "must be an array of token ids");
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& v = (*tokens)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() >= context.tokenizer->vocab_size()) {
      return WithParam(absl::InvalidArgumentError(
                           absl::StrCat("tokens[", i, "] must be a token id in [0, ",
                                        context.tokenizer->vocab_size(), "), got ", v.dump())),
                       "tokens");
    }
    ids.push_back(v.get<int32_t>());
  }
  auto text = context.tokenizer->Decode(ids, /*skip_special_tokens=*/false);
  if (!text.ok()) return WithParam(text.status(), "tokens");
  return json{{"prompt", *std::move(text)}};
}

}  // namespace ridge
