#include "server/api_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace ridge {
namespace {

constexpr char kParamPayload[] = "type.ridgeserve/param";

std::string ErrorType(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return "invalid_request_error";
    case absl::StatusCode::kResourceExhausted:
      return "rate_limit_error";
    case absl::StatusCode::kUnavailable:
      return "service_unavailable_error";
    case absl::StatusCode::kDeadlineExceeded:
      return "timeout_error";
    default:
      return "server_error";
  }
}

std::string ErrorCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return ParamOf(status) == "model" ? "model_not_found" : "not_found";
    case absl::StatusCode::kOutOfRange:
      return "context_length_exceeded";
    case absl::StatusCode::kResourceExhausted:
      return "queue_full";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case absl::StatusCode::kInvalidArgument:
      return "invalid_value";
    default:
      return "";
  }
}

}  // namespace

absl::Status FieldError(std::string_view param, std::string_view problem) {
  return WithParam(
      absl::InvalidArgumentError(absl::StrCat(std::string(param), " ", std::string(problem))),
      param);
}

absl::Status WithParam(absl::Status status, std::string_view param) {
  if (!status.ok()) status.SetPayload(kParamPayload, absl::Cord(std::string(param)));
  return status;
}

absl::Status WithParamFromMessage(absl::Status status) {
  if (status.ok() || !ParamOf(status).empty()) return status;
  const std::string_view message(status.message().data(), status.message().size());
  const size_t colon = message.find(": ");
  if (colon == std::string_view::npos || colon == 0) return status;
  std::string_view name = message.substr(0, colon);
  if (const size_t bracket = name.find('['); bracket != std::string_view::npos) {
    name = name.substr(0, bracket);
  }
  for (char c : name) {
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return status;
  }
  return WithParam(std::move(status), name);
}

std::string ParamOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kParamPayload);
  return payload ? std::string(*payload) : std::string();
}

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kDataLoss:  // a damaged session file
      return 422;
    case absl::StatusCode::kUnimplemented:  // e.g. sessions on a backend that cannot export
      return 501;
    case absl::StatusCode::kOutOfRange:
      // A prompt over --max-prompt-tokens is 413; a prompt plus max_tokens that the whole KV
      // cache cannot hold is a bad request (as vLLM answers a context length exceeded).
      return ParamOf(status) == "max_tokens" ? 400 : 413;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

nlohmann::ordered_json ErrorBody(const absl::Status& status) {
  const std::string param = ParamOf(status);
  const std::string code = ErrorCode(status);
  nlohmann::ordered_json error = {{"message", std::string(status.message())},
                                  {"type", ErrorType(status)},
                                  {"param", nullptr},
                                  {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  if (!code.empty()) error["code"] = code;
  return {{"error", std::move(error)}};
}

HttpReply JsonReply(int status, const nlohmann::ordered_json& body) {
  HttpReply reply;
  reply.status = status;
  reply.body = body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return reply;
}

HttpReply ErrorReply(const absl::Status& status) {
  HttpReply reply = JsonReply(HttpStatusFor(status), ErrorBody(status));
  if (reply.status == 429 || reply.status == 503) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

}  // namespace ridge
