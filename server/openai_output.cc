#include "server/openai_output.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/sse.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

void Append(OutputDelta& all, OutputDelta delta) {
  all.text += delta.text;
  all.tokens.insert(all.tokens.end(), delta.tokens.begin(), delta.tokens.end());
  all.logprobs.insert(all.logprobs.end(), std::make_move_iterator(delta.logprobs.begin()),
                      std::make_move_iterator(delta.logprobs.end()));
}

// "stop" becomes "tool_calls" when the model chose to call tools, as OpenAI reports it (a call
// a named tool_choice forced stays "stop", as OpenAI and vLLM report that).
std::string FinishReasonWithTools(const Choice& choice) {
  const std::string& reason = choice.collector.finish_reason();
  const bool chose =
      choice.parser && !choice.parser->forced_call() && choice.parser->tool_calls_emitted() > 0;
  return reason == "stop" && chose ? "tool_calls" : reason;
}

}  // namespace

ChoiceSet::ChoiceSet(GenerationBackend* backend, const Tokenizer* tokenizer,
                     const OpenAiRequest& api, const ResponseBuilder::Options& options,
                     const std::optional<ChatOutputParser>& parser,
                     std::vector<ChoiceSource> sources)
    : echo_(api.echo),
      echo_logprobs_(api.echo_logprobs),
      chat_prompt_logprobs_(api.kind == ApiKind::kChat && api.prompt_logprobs.has_value()),
      prompt_logprobs_(api.prompt_logprobs.value_or(0)),
      tokenizer_(tokenizer) {
  for (size_t i = 0; i < sources.size(); ++i) {
    ResponseBuilder::Options o = options;
    o.choice_index = static_cast<int>(i);
    choices_.push_back(std::make_unique<Choice>(backend, std::move(sources[i]), tokenizer, api,
                                                std::move(o), parser));
  }
}

void ChoiceSet::TakePromptScores(Choice& c, const RequestEvent& event) {
  if (!event.prompt_logprobs.empty()) c.prompt.entries = event.prompt_logprobs;
}

Choice* ChoiceSet::Find(RequestId id) {
  for (auto& c : choices_) {
    if (c->collector.id() == id) return c.get();
  }
  return nullptr;
}

bool ChoiceSet::finished() const {
  for (const auto& c : choices_) {
    if (!c->collector.finished()) return false;
  }
  return true;
}

void ChoiceSet::Cancel(CancelReason reason) {
  for (auto& c : choices_) c->collector.Cancel(reason);
}

absl::Status ChoiceSet::status() const {
  for (const auto& c : choices_) {
    if (c->collector.finished() && !c->collector.status().ok()) return c->collector.status();
  }
  return absl::OkStatus();
}

void ChoiceSet::ConsumeUnary(const RequestEvent& event) {
  Choice* c = Find(event.id);
  if (c == nullptr || c->collector.finished()) return;
  TakePromptScores(*c, event);
  Append(c->all, c->collector.Consume(event));
  // One failed choice fails the response: the others need not run on.
  if (c->collector.finished() && !c->collector.status().ok()) Cancel(CancelReason::kClient);
}

json ChoiceSet::Usage() const {
  RequestUsage total = choices_.front()->collector.usage();
  total.completion_tokens = 0;
  total.prefill_solver = {};
  total.decode_solver = {};
  for (const auto& c : choices_) {
    const RequestUsage& u = c->collector.usage();
    total.completion_tokens += u.completion_tokens;
    // Each choice reads the prompt; the prompt counts once, with its least cached share.
    total.cached_tokens = std::min(total.cached_tokens, u.cached_tokens);
    total.prefill_solver.Merge(u.prefill_solver);
    total.decode_solver.Merge(u.decode_solver);
  }
  return UsageJson(total.prompt_tokens, total.completion_tokens, total);
}

json ChoiceSet::UnaryBody() {
  json body;
  json all_choices = json::array();
  for (auto& c : choices_) {
    c->all.text = c->echo_text + c->all.text;
    json one;
    if (c->parser) {
      ChatDelta parsed = c->parser->Add(c->all.text);
      AppendChatDelta(parsed, c->parser->Finish());
      one = c->builder.Full(c->all, FinishReasonWithTools(*c), nullptr, &parsed, &c->prompt);
    } else {
      one = c->builder.Full(c->all, c->collector.finish_reason(), nullptr, nullptr, &c->prompt);
    }
    all_choices.push_back(std::move(one["choices"][0]));
    if (body.is_null()) body = std::move(one);
  }
  body["choices"] = std::move(all_choices);
  // Chat's prompt logprobs are the response's (vLLM's place): its choices share the prompt.
  if (chat_prompt_logprobs_) {
    body["prompt_logprobs"] =
        PromptLogprobsJson(choices_.front()->prompt, prompt_logprobs_, tokenizer_);
  }
  body["usage"] = Usage();
  return body;
}

std::string ChoiceSet::StreamBytes(const std::vector<RequestEvent>& events) {
  std::string out;
  if (done_) return out;
  // Each choice's echo comes first; with logprobs, once the first event brings the prompt's.
  auto send_echo = [&](Choice& c) {
    if (!echo_ || c.echoed) return;
    OutputDelta echo;
    echo.text = c.echo_text;
    out += SseEvent(c.builder.Chunk(echo, nullptr, echo_logprobs_ ? &c.prompt : nullptr));
    c.echoed = true;
  };
  if (!echo_logprobs_) {
    for (auto& c : choices_) send_echo(*c);
  }
  for (const RequestEvent& event : events) {
    Choice* c = Find(event.id);
    if (c == nullptr || c->collector.finished()) continue;
    TakePromptScores(*c, event);
    send_echo(*c);  // the choice's first event carries its prompt's logprobs
    const OutputDelta delta = c->collector.Consume(event);
    const bool tokens = wants_tokens && !delta.tokens.empty();
    if (c->parser) {
      ChatDelta parsed = c->parser->Add(delta.text);
      if (c->collector.finished() && c->collector.status().ok()) {
        AppendChatDelta(parsed, c->parser->Finish());
      }
      if (!parsed.empty() || tokens) out += SseEvent(c->builder.Chunk(delta, &parsed));
    } else if (!delta.text.empty() || tokens) {
      out += SseEvent(c->builder.Chunk(delta));
    }
    if (!c->collector.finished()) continue;
    if (!c->collector.status().ok()) {
      Cancel(CancelReason::kClient);
      out += SseEvent(ErrorBody(c->collector.status()));
      out += kSseDone;
      done_ = true;
      return out;
    }
    out += SseEvent(c->builder.FinalChunk(FinishReasonWithTools(*c)));
    if (!finished()) continue;
    if (include_usage) out += SseEvent(choices_.front()->builder.UsageChunk(Usage()));
    out += kSseDone;
    done_ = true;
    return out;
  }
  return out;
}

}  // namespace ridge
