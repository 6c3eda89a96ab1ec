#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/request.h"
#include "server/api_error.h"
#include "server/openai_structured_output.h"
#include "server/request_json.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

// Reads an integer field into *out when present; `low`/`high` bound it (inclusive).
absl::Status ReadInt(const json& body, const std::string& name, int64_t low, int64_t high,
                     std::optional<int64_t>* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) {
    return FieldError(name, absl::StrCat("must be an integer, got ", Describe(*v)));
  }
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return FieldError(name, absl::StrCat("must be in [", low, ", ", high, "], got ", v->dump()));
  }
  const int64_t value = v->get<int64_t>();
  if (value < low || value > high) {
    return FieldError(name, absl::StrCat("must be in [", low, ", ", high, "], got ", value));
  }
  *out = value;
  return absl::OkStatus();
}

struct NumberRange {
  double low, high;
  bool low_open = false;
  std::string Text() const { return absl::StrCat(low_open ? "(" : "[", low, ", ", high, "]"); }
};

absl::Status ReadNumber(const json& body, const std::string& name, NumberRange range,
                        std::optional<double>* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) {
    return FieldError(name, absl::StrCat("must be a number, got ", Describe(*v)));
  }
  const double value = v->get<double>();
  const bool above_low = range.low_open ? value > range.low : value >= range.low;
  if (!std::isfinite(value) || !above_low || value > range.high) {
    return FieldError(name, absl::StrCat("must be in ", range.Text(), ", got ", value));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadBool(const json& body, const std::string& name, bool* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) {
    return FieldError(name, absl::StrCat("must be true or false, got ", Describe(*v)));
  }
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ReadIds(const json& array, const std::string& name,
                                             int32_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const json& v = array[i];
    const std::string where = absl::StrCat(name, "[", i, "]");
    if (!v.is_number_integer()) {
      return WithParam(absl::InvalidArgumentError(
                           absl::StrCat(where, " must be an integer token id, got ", Describe(v))),
                       name);
    }
    if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(vocab_size)
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size)) {
      return WithParam(absl::InvalidArgumentError(absl::StrCat(where, " must be a token id in [0, ",
                                                               vocab_size, "), got ", v.dump())),
                       name);
    }
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

bool AllIntegers(const json& array) {
  for (const json& v : array) {
    if (!v.is_number_integer()) return false;
  }
  return true;
}

// One prompt of "prompt" (or of its list): a string, or a non-empty array of token ids.
absl::StatusOr<CompletionPrompt> ReadOnePrompt(const json& v, const std::string& param,
                                               const RequestLimits& limits) {
  CompletionPrompt prompt;
  if (v.is_string()) {
    prompt.text = v.get<std::string>();
    return prompt;
  }
  if (v.is_array() && !v.empty() && (AllIntegers(v) || v[0].is_number())) {
    for (size_t i = 0; i < v.size(); ++i) {  // name the first one that is not an integer
      if (!v[i].is_number_integer()) {
        return WithParam(absl::InvalidArgumentError(absl::StrCat(
                             param, "[", i, "] must be an integer token id, got ", Describe(v[i]))),
                         "prompt");
      }
    }
    ASSIGN_OR_RETURN(prompt.ids, ReadIds(v, "prompt", limits.vocab_size));
    return prompt;
  }
  return FieldError("prompt", absl::StrCat(param,
                                           " must be a string or a non-empty array of token "
                                           "ids, got ",
                                           Describe(v)));
}

absl::Status ReadPrompt(const json& body, const RequestLimits& limits, OpenAiRequest* out) {
  const json* v = Field(body, "prompt");
  if (v == nullptr) return FieldError("prompt", "is required");
  if (!v->is_string() && !v->is_array()) {
    return FieldError("prompt", absl::StrCat("must be a string, an array of token ids, or an array "
                                             "of those, got ",
                                             Describe(*v)));
  }
  if (v->is_array() && v->empty()) return FieldError("prompt", "must not be empty");
  // One prompt: a string or token ids; else a list of them.
  if (v->is_string() || AllIntegers(*v) || (*v)[0].is_number()) {
    ASSIGN_OR_RETURN(CompletionPrompt one, ReadOnePrompt(*v, "prompt", limits));
    out->prompts.push_back(std::move(one));
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(v->size()) > limits.max_prompts) {
    return FieldError("prompt", absl::StrCat("holds ", v->size(), " prompts; at most ",
                                             limits.max_prompts, " per request"));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    ASSIGN_OR_RETURN(CompletionPrompt one,
                     ReadOnePrompt((*v)[i], absl::StrCat("prompt[", i, "]"), limits));
    out->prompts.push_back(std::move(one));
  }
  return absl::OkStatus();
}

absl::Status ReadStop(const json& body, const RequestLimits& limits, OpenAiRequest* out) {
  const json* v = Field(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    if (v->get<std::string>().empty()) return FieldError("stop", "must not be an empty string");
    out->stop.push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) {
    return FieldError("stop",
                      absl::StrCat("must be a string or an array of strings, got ", Describe(*v)));
  }
  if (static_cast<int64_t>(v->size()) > limits.max_stop_strings) {
    return FieldError("stop", absl::StrCat("holds ", v->size(), " strings; at most ",
                                           limits.max_stop_strings, " are allowed"));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& s = (*v)[i];
    if (!s.is_string() || s.get<std::string>().empty()) {
      return WithParam(absl::InvalidArgumentError(absl::StrCat(
                           "stop[", i, "] must be a non-empty string, got ", Describe(s))),
                       "stop");
    }
    out->stop.push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ReadStopTokenIds(const json& body, const RequestLimits& limits, OpenAiRequest* out) {
  const json* v = Field(body, "stop_token_ids");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) {
    return FieldError("stop_token_ids",
                      absl::StrCat("must be an array of token ids, got ", Describe(*v)));
  }
  ASSIGN_OR_RETURN(out->sampling.stop_token_ids, ReadIds(*v, "stop_token_ids", limits.vocab_size));
  return absl::OkStatus();
}

absl::Status ReadLogprobs(const json& body, const RequestLimits& limits, OpenAiRequest* out) {
  std::optional<int64_t> top;
  if (out->kind == ApiKind::kCompletion) {
    // Legacy completions: logprobs is the number of alternatives per position.
    RETURN_IF_ERROR(ReadInt(body, "logprobs", 0, limits.max_top_logprobs, &top));
    out->logprobs = top.has_value();
    out->top_logprobs = static_cast<int32_t>(top.value_or(0));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ReadBool(body, "logprobs", &out->logprobs));
  RETURN_IF_ERROR(ReadInt(body, "top_logprobs", 0, limits.max_top_logprobs, &top));
  if (top.has_value() && *top > 0 && !out->logprobs) {
    return FieldError("top_logprobs", "requires \"logprobs\": true");
  }
  out->top_logprobs = static_cast<int32_t>(top.value_or(0));
  return absl::OkStatus();
}

// {"token id": bias, ...}: OpenAI's keys are token ids written as strings.
absl::Status ReadLogitBias(const json& body, const RequestLimits& limits, SamplingParams* p) {
  const json* v = Field(body, "logit_bias");
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  if (!v->is_object()) {
    return FieldError("logit_bias",
                      absl::StrCat("must be an object of token id -> bias, got ", Describe(*v)));
  }
  for (const auto& [key, bias] : v->items()) {
    int32_t id = -1;
    const bool numeric = !key.empty() && key.size() <= 10 &&
                         std::all_of(key.begin(), key.end(), ::isdigit) &&
                         std::stoll(key) < limits.vocab_size;
    if (numeric) id = static_cast<int32_t>(std::stoll(key));
    if (id < 0) {
      return FieldError("logit_bias",
                        absl::StrCat("key '", key.substr(0, 32), "' must be a token id in [0, ",
                                     limits.vocab_size, ")"));
    }
    if (!bias.is_number() || !(bias.get<double>() >= -100.0 && bias.get<double>() <= 100.0)) {
      return FieldError("logit_bias",
                        absl::StrCat("the bias of token ", id,
                                     " must be a number in [-100, 100], got ", Describe(bias)));
    }
    p->logit_bias.emplace_back(id, static_cast<float>(bias.get<double>()));
  }
  if (p->logit_bias.size() > kMaxLogitBiasEntries) {
    return FieldError("logit_bias", absl::StrCat("has ", p->logit_bias.size(), " entries; at most ",
                                                 kMaxLogitBiasEntries));
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const json& body, const RequestLimits& limits, OpenAiRequest* out) {
  SamplingParams& p = out->sampling;
  std::optional<int64_t> max_tokens;
  RETURN_IF_ERROR(ReadInt(body, "max_tokens", 1, limits.max_new_tokens, &max_tokens));
  if (out->kind == ApiKind::kChat) {
    RETURN_IF_ERROR(ReadInt(body, "max_completion_tokens", 1, limits.max_new_tokens, &max_tokens));
  }
  p.max_tokens = static_cast<int32_t>(
      max_tokens.value_or(out->kind == ApiKind::kChat ? limits.default_chat_max_tokens
                                                      : limits.default_completion_max_tokens));
  out->max_tokens_defaulted = !max_tokens.has_value();

  std::optional<double> number;
  RETURN_IF_ERROR(ReadNumber(body, "temperature", {0.0, kMaxTemperature}, &number));
  if (number) p.temperature = static_cast<float>(*number);
  number.reset();
  RETURN_IF_ERROR(ReadNumber(body, "top_p", {0.0, 1.0, true}, &number));
  if (number) p.top_p = static_cast<float>(*number);
  number.reset();
  RETURN_IF_ERROR(ReadNumber(body, "min_p", {0.0, 1.0}, &number));
  if (number) p.min_p = static_cast<float>(*number);
  number.reset();
  RETURN_IF_ERROR(
      ReadNumber(body, "repetition_penalty", {0.0, kMaxRepetitionPenalty, true}, &number));
  if (number) p.repetition_penalty = static_cast<float>(*number);
  number.reset();
  RETURN_IF_ERROR(ReadNumber(body, "presence_penalty", {-2.0, 2.0}, &number));
  if (number) p.presence_penalty = static_cast<float>(*number);
  number.reset();
  RETURN_IF_ERROR(ReadNumber(body, "frequency_penalty", {-2.0, 2.0}, &number));
  if (number) p.frequency_penalty = static_cast<float>(*number);

  std::optional<int64_t> top_k;
  RETURN_IF_ERROR(ReadInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  if (top_k) p.top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);  // -1: off, as in vLLM

  if (const json* seed = Field(body, "seed")) {
    if (!seed->is_number_integer()) {
      return FieldError("seed", absl::StrCat("must be an integer, got ", Describe(*seed)));
    }
    p.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  }
  RETURN_IF_ERROR(ReadBool(body, "ignore_eos", &p.ignore_eos));
  std::optional<int64_t> min_tokens;  // vLLM's
  RETURN_IF_ERROR(ReadInt(body, "min_tokens", 0, limits.max_new_tokens, &min_tokens));
  if (min_tokens) {
    if (*min_tokens > p.max_tokens && max_tokens.has_value()) {
      return FieldError("min_tokens", absl::StrCat("must be at most max_tokens (", p.max_tokens,
                                                   "), got ", *min_tokens));
    }
    p.min_tokens = static_cast<int32_t>(*min_tokens);
    // A default max_tokens makes room for them (the engine may lower it to what fits).
    p.max_tokens = std::max(p.max_tokens, p.min_tokens);
  }
  RETURN_IF_ERROR(ReadLogitBias(body, limits, &p));
  return ReadStopTokenIds(body, limits, out);
}

absl::Status ReadUnsupported(const json& body, const RequestLimits& limits, OpenAiRequest* out) {
  const ApiKind kind = out->kind;
  std::optional<int64_t> n;
  RETURN_IF_ERROR(ReadInt(body, "n", 1, limits.max_choices, &n));
  out->n = static_cast<int32_t>(n.value_or(1));
  if (kind == ApiKind::kCompletion) {
    if (const json* v = Field(body, "best_of")) {
      if (!v->is_number_integer() || v->get<int64_t>() != 1) {
        return FieldError("best_of", absl::StrCat("must be 1, got ", Describe(*v)));
      }
    }
    RETURN_IF_ERROR(ReadBool(body, "echo", &out->echo));
    if (const json* v = Field(body, "suffix");
        v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      return FieldError("suffix", "is not supported (no insertion mode); leave it out");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadStreaming(const json& body, OpenAiRequest* out) {
  RETURN_IF_ERROR(ReadBool(body, "stream", &out->stream));
  const json* options = Field(body, "stream_options");
  if (options == nullptr) return absl::OkStatus();
  if (!options->is_object()) {
    return FieldError("stream_options",
                      absl::StrCat("must be an object, got ", Describe(*options)));
  }
  if (!out->stream) {
    return FieldError("stream_options", "is only allowed when \"stream\" is true");
  }
  const json* include = Field(*options, "include_usage");
  if (include != nullptr) {
    if (!include->is_boolean()) {
      return FieldError("stream_options", absl::StrCat("include_usage must be true or false, got ",
                                                       Describe(*include)));
    }
    out->include_usage = include->get<bool>();
  }
  return absl::OkStatus();
}

absl::Status ReadExtensions(const json& body, const RequestLimits& limits, OpenAiRequest* out) {
  std::optional<double> number;
  RETURN_IF_ERROR(ReadNumber(body, "solver_tolerance", {0.0, 1.0}, &number));
  if (number) out->solver_tolerance = static_cast<float>(*number);
  std::optional<int64_t> iterations;
  RETURN_IF_ERROR(
      ReadInt(body, "solver_max_iterations", 1, limits.max_solver_iterations, &iterations));
  if (iterations) out->solver_max_iterations = static_cast<int32_t>(*iterations);
  number.reset();
  RETURN_IF_ERROR(ReadNumber(body, "timeout", {0.0, 86400.0, true}, &number));
  out->timeout_seconds = number;
  if (const json* salt = Field(body, "cache_salt")) {
    if (!salt->is_string() || salt->get<std::string>().empty() ||
        salt->get<std::string>().size() > kMaxCacheSaltBytes) {
      return FieldError("cache_salt", absl::StrCat("must be a string of 1 to ", kMaxCacheSaltBytes,
                                                   " bytes, got ", Describe(*salt)));
    }
    out->cache_salt = salt->get<std::string>();
  }
  if (const json* session = Field(body, "session_id")) {
    if (!session->is_string()) {
      return FieldError("session_id", absl::StrCat("must be a string, got ", Describe(*session)));
    }
    if (absl::Status valid = ValidateSessionId(session->get<std::string>()); !valid.ok()) {
      return WithParam(valid, "session_id");
    }
    out->session_id = session->get<std::string>();
  }
  std::optional<int64_t> prompt_logprobs;  // vLLM's
  RETURN_IF_ERROR(ReadInt(body, "prompt_logprobs", 0, limits.max_top_logprobs, &prompt_logprobs));
  if (prompt_logprobs) out->prompt_logprobs = static_cast<int32_t>(*prompt_logprobs);
  return ReadBool(body, "return_token_ids", &out->return_token_ids);
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const json& body, ApiKind kind,
                                                 const RequestLimits& limits) {
  if (!body.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  OpenAiRequest out;
  out.kind = kind;
  if (const json* model = Field(body, "model")) {
    if (!model->is_string()) {
      return FieldError("model", absl::StrCat("must be a string, got ", Describe(*model)));
    }
    out.model = model->get<std::string>();
  }
  if (kind == ApiKind::kCompletion) {
    RETURN_IF_ERROR(ReadPrompt(body, limits, &out));
  } else {
    RETURN_IF_ERROR(ReadChatFields(body, &out.chat));
  }
  RETURN_IF_ERROR(ReadUnsupported(body, limits, &out));
  RETURN_IF_ERROR(ReadResponseFormat(body, &out));
  RETURN_IF_ERROR(ReadToolArguments(&out));
  RETURN_IF_ERROR(ReadSampling(body, limits, &out));
  RETURN_IF_ERROR(ReadStop(body, limits, &out));
  RETURN_IF_ERROR(ReadLogprobs(body, limits, &out));
  RETURN_IF_ERROR(ReadStreaming(body, &out));
  RETURN_IF_ERROR(ReadExtensions(body, limits, &out));
  RETURN_IF_ERROR(ReadBool(body, "include_stop_str_in_output", &out.include_stop_str_in_output));
  if (!out.session_id.empty() && out.n > 1) {
    return FieldError("session_id", "cannot be combined with n > 1 (one answer continues it)");
  }
  if (static_cast<int64_t>(out.prompts.size()) * out.n > limits.max_prompts) {
    return FieldError("n", absl::StrCat(out.n, " choices for each of ", out.prompts.size(),
                                        " prompts make more than ", limits.max_prompts,
                                        " answers in one request"));
  }
  out.echo_logprobs = out.echo && out.logprobs;
  if (out.echo_logprobs && !out.session_id.empty()) {
    return FieldError("echo",
                      "with logprobs scores the prompt, which a request that continues a "
                      "session (session_id) does not compute");
  }
  if (out.prompt_logprobs && out.stream) {  // as vLLM refuses it
    return FieldError("prompt_logprobs", "is not available with \"stream\": true");
  }
  if (out.prompt_logprobs && !out.session_id.empty()) {
    return FieldError("prompt_logprobs",
                      "cannot be combined with session_id: a request that "
                      "continues a session does not compute its history");
  }
  return out;
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const nlohmann::json& body, ApiKind kind,
                                                 const RequestLimits& limits) {
  return ParseOpenAiRequest(json(body), kind, limits);
}

}  // namespace ridge
