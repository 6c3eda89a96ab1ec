// The engine's record of one request (private to the engine's translation units).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ridge {

struct Engine::Sequence {
  explicit Sequence(Sampler s) : sampler(std::move(s)) {}

  RequestId id = 0;
  EngineRequest request;
  std::shared_ptr<RequestSink> sink;
  Sampler sampler;
  SolverOptions solver;
  SequenceMemory memory;  // its state slot and KV blocks
  // What the sequence prefills when admitted: its prompt, or after a preemption its prompt and
  // every token it generated (recomputed, so the output goes on as if never preempted).
  std::vector<int32_t> feed;
  int64_t prompt_done = 0;  // tokens of `feed` processed
  int64_t position = 0;     // tokens in its memory
  std::vector<int32_t> generated;
  int32_t next_token = 0;
  SteadyTime submitted, last_token;
  bool has_token = false;
  RequestUsage usage;
  std::string cache_space;  // the prefix cache's namespace: the salt and the solver budget
  PrefixCache::Hit hit;     // looked up while waiting, valid while the cache's generation holds
  uint64_t hit_generation = ~uint64_t{0};
  bool joined_session = false;                // holds request.session_id (JoinSession)
  PrefixCache::Node* session_node = nullptr;  // the session's state it continues, if any
  // The EOS or stop token that ended it (never in `generated`), for its session's history.
  std::optional<int32_t> final_token;
  RequestEvent pending;  // tokens of this step, sent once the step is over
  // Prompt logprobs (EngineRequest::prompt_logprobs) computed so far, until the prompt is done
  // and they go out with the first event.
  std::vector<LogprobEntry> prompt_scores;
  bool prompt_scores_sent = false;

  bool wants_logprobs() const { return request.logprobs || request.top_logprobs > 0; }
  bool scores_prompt() const { return request.prompt_logprobs >= 0 && !prompt_scores_sent; }
  // Rows of the next prompt piece of n tokens that have a next prompt token to score.
  int64_t PromptRowsToScore(int64_t n) const {
    const int64_t left = static_cast<int64_t>(request.prompt.size()) - 1 - prompt_done;
    return std::clamp<int64_t>(left, 0, n);
  }
  // Its prompt and every token it generated: its state holds the first `position` of them (the
  // last one picked may not have been fed yet).
  std::vector<int32_t> history() const {
    std::vector<int32_t> all = request.prompt;
    all.insert(all.end(), generated.begin(), generated.end());
    return all;
  }
};

}  // namespace ridge
