// Engine requests run to their end, for tests: what a request produced, greedy requests that
// report logprobs, deterministic token patterns, and a comparison of two outcomes.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "tests/support/collecting_sink.h"

namespace ridge::testing {

struct RequestOutcome {
  std::vector<int32_t> tokens = {};
  std::vector<LogprobEntry> logprobs = {};
  RequestUsage usage = {};
  absl::Status status = {};  // Submit's error, or the final event's status
};

inline RequestOutcome RunToEnd(Engine& engine, EngineRequest request) {
  auto sink = std::make_shared<CollectingSink>();
  auto id = engine.Submit(std::move(request), sink);
  if (!id.ok()) return {.status = id.status()};
  RequestEvent last = sink->Wait();
  return {sink->tokens(), sink->logprobs(), last.usage, last.status};
}

// Greedy, past EOS, reporting each token's logprob and its `top_logprobs` best alternatives.
inline EngineRequest GreedyRequest(std::vector<int32_t> prompt, int max_tokens,
                                   const std::string& session_id = "", int top_logprobs = 5) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.logprobs = true;
  r.top_logprobs = top_logprobs;
  r.session_id = session_id;
  return r;
}

// `count` token ids below `vocab`, a different sequence for each seed.
inline std::vector<int32_t> PatternTokens(int count, int seed, int vocab) {
  std::vector<int32_t> out;
  for (int t = 0; t < count; ++t) out.push_back((t * 37 + seed * 101 + 5) % vocab);
  return out;
}

// Same tokens, and log-probabilities equal to the bit (tolerance 0) or within `tolerance`.
inline void ExpectSameOutcome(const RequestOutcome& got, const RequestOutcome& want,
                              float tolerance, const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
  ASSERT_TRUE(want.status.ok()) << what << ": " << want.status;
  ASSERT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    if (tolerance == 0.0f) {
      EXPECT_EQ(got.logprobs[i].logprob, want.logprobs[i].logprob) << what << " token " << i;
      EXPECT_EQ(got.logprobs[i].top, want.logprobs[i].top) << what << " token " << i;
      continue;
    }
    EXPECT_NEAR(got.logprobs[i].logprob, want.logprobs[i].logprob, tolerance) << what;
    ASSERT_EQ(got.logprobs[i].top.size(), want.logprobs[i].top.size()) << what;
    for (size_t j = 0; j < got.logprobs[i].top.size(); ++j) {
      EXPECT_NEAR(got.logprobs[i].top[j].second, want.logprobs[i].top[j].second, tolerance);
    }
  }
}

}  // namespace ridge::testing
