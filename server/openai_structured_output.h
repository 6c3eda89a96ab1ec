// The JSON constraints an OpenAI request asks for: response_format (JSON mode, a JSON schema)
// and a constraining tool_choice (a named function's arguments, "required" calls), each compiled
// into a JsonSchema, or a 400 naming the field. Part of ParseOpenAiRequest (openai_request.cc),
// internal to the HTTP library.
#pragma once

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/openai_request.h"

namespace ridge {

// response_format: {"type": "text" | "json_object" | "json_schema", ...} into out->json_object
// or out->json_schema.
absl::Status ReadResponseFormat(const nlohmann::ordered_json& body, OpenAiRequest* out);

// A named or "required" tool_choice (out->chat, read already) into out->tool_arguments.
absl::Status ReadToolArguments(OpenAiRequest* out);

}  // namespace ridge
