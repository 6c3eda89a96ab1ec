// POST /tokenize and POST /detokenize, as vLLM serves them:
//   /tokenize   {"prompt": "text", "add_special_tokens": true}            (completion form)
//               {"messages": [...], "add_generation_prompt": true, "tools", "chat_template_kwargs",
//                "continue_final_message", "add_special_tokens": false}   (chat form, templated)
//               optional "return_token_strs": true
//            -> {"count", "max_model_len", "tokens", "token_strs"}
//   /detokenize {"tokens": [ids]} -> {"prompt": "text"}
// Errors carry the field at fault (api_error.h), like the generation routes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

struct TokenizeContext {
  const Tokenizer* tokenizer = nullptr;         // null: both routes answer 400
  const ChatTemplate* chat_template = nullptr;  // null: the chat form answers 400
  std::string model_id;                         // the only accepted "model"
  int64_t max_model_len = 0;                    // reported: the longest prompt accepted
};

absl::StatusOr<nlohmann::ordered_json> TokenizeRequest(const TokenizeContext& context,
                                                       const std::string& body);
absl::StatusOr<nlohmann::ordered_json> DetokenizeRequest(const TokenizeContext& context,
                                                         const std::string& body);

}  // namespace ridge
