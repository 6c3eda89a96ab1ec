// JSON bodies of OpenAI completion / chat completion responses and stream chunks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "nlohmann/json.hpp"
#include "server/chat_output_parser.h"
#include "server/openai_request.h"
#include "server/output_assembler.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

// "length" for the token cap, "stop" for EOS, a stop token id or a stop string.
const char* OpenAiFinishReason(FinishReason reason);

// {prompt_tokens, completion_tokens, total_tokens, solver: {prefill: {...}, decode: {...}}}.
nlohmann::ordered_json UsageJson(int64_t prompt_tokens, int64_t completion_tokens,
                                 const RequestUsage& usage);

// A token's text for logprobs ("token_id:N" without a tokenizer or for an unknown id).
std::string TokenText(const Tokenizer* tokenizer, int32_t id);

// A prompt's logprobs as the engine gives them (EngineRequest::prompt_logprobs).
struct PromptScores {
  int32_t first_token = 0;            // the prompt's first token, which has none
  std::vector<LogprobEntry> entries;  // the prompt's tokens 1.. (each with alternatives)
};

// vLLM's "prompt_logprobs": null for the first token, then for each token an object keyed by
// token id ({"logprob", "rank", "decoded_token"}) holding the token and its `top` most likely
// alternatives.
nlohmann::ordered_json PromptLogprobsJson(const PromptScores& prompt, int32_t top,
                                          const Tokenizer* tokenizer);

class ResponseBuilder {
 public:
  struct Options {
    ApiKind kind = ApiKind::kCompletion;
    std::string id;  // "cmpl-..." / "chatcmpl-..."
    int64_t created = 0;
    std::string model;
    const Tokenizer* tokenizer = nullptr;  // for logprob token strings; may be null
    bool logprobs = false;
    // Completions with echo and logprobs: the prompt's tokens lead the logprobs, with this many
    // alternatives each (the request's "logprobs").
    bool echo_logprobs = false;
    int32_t top_logprobs = 0;
    // vLLM's prompt_logprobs (completions: each choice has them): this many alternatives.
    std::optional<int32_t> prompt_logprobs;
    bool include_usage = false;  // streams: every chunk carries "usage": null
    bool return_token_ids = false;
    bool reasoning = false;  // chat with a reasoning parser: messages carry reasoning_content
    int choice_index = 0;    // "index" of the choice this builder writes (n > 1)
  };
  explicit ResponseBuilder(Options options) : options_(std::move(options)) {}

  // A stream chunk with the delta's text (chat: the first also carries the role). For chat with a
  // reasoning or tool-call parser, `parsed` is the delta's text split into content, reasoning and
  // tool calls, and replaces delta.text. `prompt` (echo with logprobs): the prompt's logprobs
  // lead the chunk's.
  nlohmann::ordered_json Chunk(const OutputDelta& delta, const ChatDelta* parsed = nullptr,
                               const PromptScores* prompt = nullptr);
  // The last choice chunk: empty text, the finish reason.
  nlohmann::ordered_json FinalChunk(const std::string& finish_reason);
  // The chunk after the last one when usage was asked for: no choices.
  nlohmann::ordered_json UsageChunk(nlohmann::ordered_json usage) const;
  // A whole non-streaming response.
  // `prompt`: the prompt's logprobs, for echo with logprobs and prompt_logprobs (completions).
  nlohmann::ordered_json Full(const OutputDelta& all, const std::string& finish_reason,
                              nlohmann::ordered_json usage, const ChatDelta* parsed = nullptr,
                              const PromptScores* prompt = nullptr);

  // Unique ids for responses: prefix + 24 random hex digits.
  static std::string NewId(ApiKind kind);

 private:
  nlohmann::ordered_json Envelope(bool chunk) const;
  // The choice's "logprobs": the generated tokens', after the prompt's when echoed.
  nlohmann::ordered_json Logprobs(const std::vector<LogprobEntry>& logprobs,
                                  const PromptScores* prompt = nullptr);

  Options options_;
  bool role_sent_ = false;
  int64_t text_offset_ = 0;  // completions logprobs: text_offset of the next token
};

}  // namespace ridge
