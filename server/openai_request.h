// The body of POST /v1/completions and /v1/chat/completions, parsed and range-checked. Unknown
// fields are ignored as OpenAI does; a known field of the wrong type or out of range is an
// InvalidArgument naming it (server/api_error.h's ParamOf). JSON null means "not given".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sampling/json_schema.h"
#include "sampling/sampling_params.h"
#include "server/chat_request.h"

namespace ridge {

enum class ApiKind { kCompletion, kChat };

// What the server allows; fields outside these are rejected with the limit in the message.
struct RequestLimits {
  int32_t vocab_size = 0;
  int32_t max_new_tokens = 1 << 16;
  int32_t max_solver_iterations = 100;
  int32_t max_top_logprobs = 20;
  int32_t max_stop_strings = 16;
  int32_t max_choices = 16;   // "n"
  int32_t max_prompts = 256;  // completions: prompts in one request ("prompt" as a list)
  // max_tokens when the body gives none: OpenAI's 16 for completions; chat runs until EOS.
  int32_t default_completion_max_tokens = 16;
  int32_t default_chat_max_tokens = 4096;
};

// One prompt of a completions request: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::optional<std::vector<int32_t>> ids;
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;  // empty when omitted

  // Completions: one or more prompts ("prompt" as a list of them: each gets n choices, numbered
  // prompt by prompt as OpenAI numbers them). Chat: none (its messages are in `chat`).
  std::vector<CompletionPrompt> prompts;
  ChatFields chat;  // messages, tools, tool_choice, template switches

  SamplingParams sampling;
  bool max_tokens_defaulted = false;        // the body named no max_tokens (max_completion_tokens)
  std::vector<std::string> stop;            // matched on the decoded text
  bool include_stop_str_in_output = false;  // vLLM: the matched stop string stays in the text
  int32_t n = 1;      // choices: independent samples (seed + i when a seed is given)
  bool echo = false;  // completions: the prompt comes before each choice's text
  std::optional<float> solver_tolerance;
  std::optional<int32_t> solver_max_iterations;

  bool logprobs = false;     // report the sampled tokens' logprobs
  int32_t top_logprobs = 0;  // and the n most likely alternatives
  // Completions with echo and logprobs: the prompt's tokens get logprobs too, in the same list
  // (the first one's null), as OpenAI's legacy completions give them.
  bool echo_logprobs = false;
  // vLLM's "prompt_logprobs": each prompt token after the first with its logprob, rank and this
  // many alternatives, in the choice's (completions) or the response's (chat) prompt_logprobs.
  std::optional<int32_t> prompt_logprobs;

  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  std::optional<double> timeout_seconds;  // extension: deadline from arrival
  bool return_token_ids = false;          // extension: add "token_ids" to each choice
  std::string cache_salt;    // as vLLM's: only requests with the same salt share cached prefixes
  std::string session_id;    // extension: a saved session to continue and save (engine/request.h)
  bool json_object = false;  // response_format {"type": "json_object"}: the output is one object
  // response_format {"type": "json_schema"}: the output is one instance of this schema.
  std::shared_ptr<const JsonSchema> json_schema;
  // A named tool_choice: the output is the arguments of a call to that function, one instance of
  // its parameters (an object without properties when it has none); "required": a list of
  // {"name", "arguments"} calls of the tools.
  std::shared_ptr<const JsonSchema> tool_arguments;
};

// Object keys keep the client's order (tools and arguments reach the template as sent).
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const nlohmann::ordered_json& body, ApiKind kind,
                                                 const RequestLimits& limits);
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const nlohmann::json& body, ApiKind kind,
                                                 const RequestLimits& limits);

}  // namespace ridge
