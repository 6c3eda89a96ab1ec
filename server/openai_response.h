// JSON bodies of OpenAI completion / chat completion responses and stream chunks.
#pragma once

#include <cstdint>
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

class ResponseBuilder {
 public:
  struct Options {
    ApiKind kind = ApiKind::kCompletion;
    std::string id;  // "cmpl-..." / "chatcmpl-..."
    int64_t created = 0;
    std::string model;
    const Tokenizer* tokenizer = nullptr;  // for logprob token strings; may be null
    bool logprobs = false;
    bool include_usage = false;  // streams: every chunk carries "usage": null
    bool return_token_ids = false;
    bool reasoning = false;  // chat with a reasoning parser: messages carry reasoning_content
    int choice_index = 0;    // "index" of the choice this builder writes (n > 1)
  };
  explicit ResponseBuilder(Options options) : options_(std::move(options)) {}

  // A stream chunk with the delta's text (chat: the first also carries the role). For chat with a
  // reasoning or tool-call parser, `parsed` is the delta's text split into content, reasoning and
  // tool calls, and replaces delta.text.
  nlohmann::ordered_json Chunk(const OutputDelta& delta, const ChatDelta* parsed = nullptr);
  // The last choice chunk: empty text, the finish reason.
  nlohmann::ordered_json FinalChunk(const std::string& finish_reason);
  // The chunk after the last one when usage was asked for: no choices.
  nlohmann::ordered_json UsageChunk(nlohmann::ordered_json usage) const;
  // A whole non-streaming response.
  nlohmann::ordered_json Full(const OutputDelta& all, const std::string& finish_reason,
                              nlohmann::ordered_json usage, const ChatDelta* parsed = nullptr);

  // Unique ids for responses: prefix + 24 random hex digits.
  static std::string NewId(ApiKind kind);

 private:
  nlohmann::ordered_json Envelope(bool chunk) const;
  nlohmann::ordered_json Logprobs(const std::vector<LogprobEntry>& logprobs);

  Options options_;
  bool role_sent_ = false;
  int tool_call_index_ = 0;  // streams: the index of the next tool call
  int64_t text_offset_ = 0;  // completions logprobs: text_offset of the next token
};

}  // namespace ridge
