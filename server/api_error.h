// Errors of the OpenAI-compatible API: an absl::Status carries the request field at fault (the
// OpenAI body's "param") as a payload, and maps to an HTTP status and an OpenAI error body.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/http_types.h"

namespace ridge {

// InvalidArgument naming `param`, e.g. FieldError("temperature", "must be in [0, 2], got 3").
// The message starts with the parameter name so it reads well on its own.
absl::Status FieldError(std::string_view param, std::string_view problem);

// Attaches `param` to `status` (a no-op for OK).
absl::Status WithParam(absl::Status status, std::string_view param);

// For errors from layers that know no params but start their message with the field name
// ("max_tokens: 70000 is more than ..."), attaches that name (without any [index]).
absl::Status WithParamFromMessage(absl::Status status);

// The parameter attached by FieldError / WithParam, or "" when none.
std::string ParamOf(const absl::Status& status);

// 400 invalid argument, 404 not found, 413 out of range (prompt too long), 429 resource
// exhausted (queue full), 503 unavailable (not ready, draining), 504 deadline exceeded,
// 499 cancelled, 500 otherwise.
int HttpStatusFor(const absl::Status& status);

// {"error": {"message", "type", "param", "code"}} as OpenAI sends it (keys in that order).
nlohmann::ordered_json ErrorBody(const absl::Status& status);

// A JSON reply: `body` dumped (invalid UTF-8 replaced), with `status`.
HttpReply JsonReply(int status, const nlohmann::ordered_json& body);
// The error reply of `status`: its HTTP status, ErrorBody, and Retry-After on 429 and 503.
HttpReply ErrorReply(const absl::Status& status);

}  // namespace ridge
