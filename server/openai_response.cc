#include "server/openai_response.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

json SolverJson(const SolverStats& s) {
  return {{"solves", s.solves},
          {"mean_iterations", s.MeanIterations()},
          {"max_iterations", s.max_iterations},
          {"capped_fraction", s.CappedFraction()},
          {"mean_relative_residual", s.MeanRelativeResidual()}};
}

json Bytes(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

json ToolCallJson(const ToolCallPiece& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

const char* OpenAiFinishReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

json UsageJson(int64_t prompt_tokens, int64_t completion_tokens, const RequestUsage& usage) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
          {"solver",
           {{"prefill", SolverJson(usage.prefill_solver)},
            {"decode", SolverJson(usage.decode_solver)}}}};
}

std::string TokenText(const Tokenizer* tokenizer, int32_t id) {
  if (tokenizer != nullptr) {
    const int32_t ids[1] = {id};
    auto text = tokenizer->Decode(ids, /*skip_special_tokens=*/false);
    if (text.ok()) return *std::move(text);
  }
  return absl::StrCat("token_id:", id);
}

std::string ResponseBuilder::NewId(ApiKind kind) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char hex[25];
  const uint64_t a = rng(), b = rng();
  std::snprintf(hex, sizeof(hex), "%016llx%08llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b & 0xffffffffULL));
  return absl::StrCat(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-", hex);
}

json ResponseBuilder::Envelope(bool chunk) const {
  const bool chat = options_.kind == ApiKind::kChat;
  const char* object =
      chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", options_.id},
          {"object", object},
          {"created", options_.created},
          {"model", options_.model}};
}

json PromptLogprobsJson(const PromptScores& prompt, int32_t top, const Tokenizer* tokenizer) {
  json out = json::array({nullptr});
  for (const LogprobEntry& lp : prompt.entries) {
    json position = json::object();
    position[std::to_string(lp.token)] = {{"logprob", lp.logprob},
                                          {"rank", lp.rank},
                                          {"decoded_token", TokenText(tokenizer, lp.token)}};
    for (size_t i = 0; i < lp.top.size() && static_cast<int32_t>(i) < top; ++i) {
      const auto& [id, value] = lp.top[i];
      const std::string key = std::to_string(id);
      if (position.contains(key)) continue;  // the prompt's token, ranked above
      position[key] = {{"logprob", value},
                       {"rank", static_cast<int32_t>(i) + 1},
                       {"decoded_token", TokenText(tokenizer, id)}};
    }
    out.push_back(std::move(position));
  }
  return out;
}

json ResponseBuilder::Logprobs(const std::vector<LogprobEntry>& logprobs,
                               const PromptScores* prompt) {
  if (!options_.logprobs) return nullptr;
  const Tokenizer* tok = options_.tokenizer;
  if (options_.kind == ApiKind::kChat) {
    json content = json::array();
    for (const LogprobEntry& lp : logprobs) {
      const std::string text = TokenText(tok, lp.token);
      json top = json::array();
      for (const auto& [id, value] : lp.top) {
        const std::string alt = TokenText(tok, id);
        top.push_back({{"token", alt}, {"logprob", value}, {"bytes", Bytes(alt)}});
      }
      content.push_back({{"token", text},
                         {"logprob", lp.logprob},
                         {"bytes", Bytes(text)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  auto add_token = [&](int32_t token) {
    const std::string text = TokenText(tok, token);
    tokens.push_back(text);
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(text.size());
  };
  if (prompt != nullptr && options_.echo_logprobs) {  // OpenAI's echo: the prompt's first
    add_token(prompt->first_token);
    token_logprobs.push_back(nullptr);
    top_logprobs.push_back(nullptr);
    for (const LogprobEntry& lp : prompt->entries) {
      add_token(lp.token);
      token_logprobs.push_back(lp.logprob);
      json top = json::object();
      for (size_t i = 0; i < lp.top.size() && static_cast<int32_t>(i) < options_.top_logprobs;
           ++i) {
        top[TokenText(tok, lp.top[i].first)] = lp.top[i].second;
      }
      top_logprobs.push_back(std::move(top));
    }
  }
  for (const LogprobEntry& lp : logprobs) {
    const std::string text = TokenText(tok, lp.token);
    tokens.push_back(text);
    token_logprobs.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, value] : lp.top) top[TokenText(tok, id)] = value;
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(text.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

json ResponseBuilder::Chunk(const OutputDelta& delta, const ChatDelta* parsed,
                            const PromptScores* prompt) {
  json choice = {{"index", options_.choice_index}};
  if (options_.kind == ApiKind::kChat) {
    json d = json::object();
    if (!role_sent_) d["role"] = "assistant";
    role_sent_ = true;
    if (parsed == nullptr) {
      d["content"] = delta.text;
    } else {
      if (!parsed->content.empty() || parsed->empty()) d["content"] = parsed->content;
      if (!parsed->reasoning.empty()) d["reasoning_content"] = parsed->reasoning;
      if (!parsed->tool_calls.empty()) {
        json calls = json::array();
        for (const ToolCallPiece& piece : parsed->tool_calls) {
          json item = {{"index", piece.index}};
          if (piece.opens_call()) {
            item.update(ToolCallJson(piece));
          } else {
            item["function"] = {{"arguments", piece.arguments}};
          }
          calls.push_back(std::move(item));
        }
        d["tool_calls"] = std::move(calls);
      }
    }
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = delta.text;
  }
  choice["logprobs"] = Logprobs(delta.logprobs, prompt);
  choice["finish_reason"] = nullptr;
  if (options_.return_token_ids) choice["token_ids"] = delta.tokens;
  json chunk = Envelope(true);
  chunk["choices"] = json::array({std::move(choice)});
  if (options_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json ResponseBuilder::FinalChunk(const std::string& finish_reason) {
  json choice = {{"index", options_.choice_index}};
  if (options_.kind == ApiKind::kChat) {
    choice["delta"] = json::object();
    if (!role_sent_) choice["delta"]["role"] = "assistant";
    role_sent_ = true;
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  json chunk = Envelope(true);
  chunk["choices"] = json::array({std::move(choice)});
  if (options_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json ResponseBuilder::UsageChunk(json usage) const {
  json chunk = Envelope(true);
  chunk["choices"] = json::array();
  chunk["usage"] = std::move(usage);
  return chunk;
}

json ResponseBuilder::Full(const OutputDelta& all, const std::string& finish_reason, json usage,
                           const ChatDelta* parsed, const PromptScores* prompt) {
  json choice = {{"index", options_.choice_index}};
  if (options_.kind == ApiKind::kChat && parsed != nullptr) {
    json message = {{"role", "assistant"}};
    const bool blank = parsed->content.find_first_not_of(" \t\r\n") == std::string::npos;
    // With tool calls and no text besides, content is null, as OpenAI sends it.
    message["content"] =
        blank && !parsed->tool_calls.empty() ? json(nullptr) : json(parsed->content);
    if (options_.reasoning) {
      message["reasoning_content"] =
          parsed->reasoning.empty() ? json(nullptr) : json(parsed->reasoning);
    }
    if (!parsed->tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCallPiece& call : parsed->tool_calls) calls.push_back(ToolCallJson(call));
      message["tool_calls"] = std::move(calls);
    }
    choice["message"] = std::move(message);
  } else if (options_.kind == ApiKind::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", all.text}};
  } else {
    choice["text"] = all.text;
  }
  choice["logprobs"] = Logprobs(all.logprobs, prompt);
  choice["finish_reason"] = finish_reason;
  if (options_.return_token_ids) choice["token_ids"] = all.tokens;
  if (options_.kind == ApiKind::kCompletion && options_.prompt_logprobs && prompt != nullptr) {
    choice["prompt_logprobs"] =
        PromptLogprobsJson(*prompt, *options_.prompt_logprobs, options_.tokenizer);
  }
  json response = Envelope(false);
  response["choices"] = json::array({std::move(choice)});
  response["usage"] = std::move(usage);
  return response;
}

}  // namespace ridge
