// What a transport hands the engine, and what the engine sends back. No HTTP or protobuf types:
// gRPC and HTTP translate their messages into these.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/solver_types.h"
#include "sampling/sampling_params.h"

namespace ridge {

using RequestId = uint64_t;

// The longest cache_salt a request may carry.
inline constexpr size_t kMaxCacheSaltBytes = 256;
using SteadyTime = std::chrono::steady_clock::time_point;

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids, validated against the vocabulary on Submit
  SamplingParams sampling;
  std::optional<SolverOptions> solver;  // unset: the engine's default budget
  int32_t top_logprobs = 0;             // 0: none; else the n most likely tokens per step (<= 20)
  bool logprobs = false;                // report the sampled token's logprob
  // -1: none. n >= 0: each prompt token after the first comes back with its log-probability
  // under the model given the tokens before it, and the n most likely tokens there (<= 20), in
  // the request's first event (RequestEvent::prompt_logprobs). The whole prompt is computed for
  // it: no cached prefix is used, and it cannot continue a session.
  int32_t prompt_logprobs = -1;
  std::optional<SteadyTime> deadline;  // cancelled with kDeadlineExceeded when passed
  // The client named no max_tokens (sampling.max_tokens is a default): Submit lowers it to what
  // the model's context and the KV cache can hold beside the prompt, as vLLM does, instead of
  // refusing the request.
  bool max_tokens_defaulted = false;
  // Prefix-cache isolation (as vLLM's cache_salt): only requests with the same salt share
  // cached prefixes.
  std::string cache_salt;
  // A saved session to continue (its tokens come before `prompt`, its state is restored) and to
  // save this request's final state under when it ends normally; empty: none. The engine's
  // sessions (Engine::ListSessions) say which exist.
  std::string session_id;
  // Positions inside the prompt (increasing, 0 < p < its length, at most kMaxSnapshotPoints)
  // where the prefix cache also keeps the state, e.g. where chat turns begin; prefill chunks end
  // there.
  std::vector<int64_t> snapshot_points = {};
};

inline constexpr size_t kMaxSnapshotPoints = 16;

// Session ids: 1 to 128 of [A-Za-z0-9_.-], not starting with '.' (they name files on disk).
absl::Status ValidateSessionId(std::string_view id);

enum class FinishReason { kLength, kStop, kEos, kCancelled, kError };
// Why a transport ends a request early: the client went away or asked to (finishes as
// kCancelled), one of its stop strings matched the text (finishes as kStop, status OK), or the
// server is shutting down and its drain time ran out (kCancelled, status Unavailable).
enum class CancelReason { kClient, kStopString, kShutdown };
const char* FinishReasonName(FinishReason reason);  // "length", "stop", "eos", "cancelled", "error"

// The tokens that end a request's output: the model's end-of-sequence tokens (unless ignore_eos)
// and the request's stop tokens. A JSON-constrained output may end only with one of them.
std::vector<int32_t> OutputEndTokens(const std::vector<int64_t>& eos_token_ids,
                                     const SamplingParams& sampling);

struct LogprobEntry {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
  int32_t rank = 0;  // prompt logprobs: tokens at least as likely (1: the most likely)
};

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache served (not computed)
  SolverStats prefill_solver;
  SolverStats decode_solver;
  double queue_seconds = 0.0;  // submit -> admitted into a state slot
  double time_to_first_token_seconds = 0.0;
  double total_seconds = 0.0;
};

// One event per step that produced something for the request. The last event of every request
// has `finished` set (exactly once), with usage filled in; an error or cancellation arrives
// that way too, with `status` saying why (kCancelled, kDeadlineExceeded, kInternal, ...).
struct RequestEvent {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // new tokens (a stop id or EOS that ended it is not included)
  std::vector<LogprobEntry> logprobs;  // parallel to tokens when asked for
  // With EngineRequest::prompt_logprobs, in the first event: entry i is prompt token i + 1's.
  std::vector<LogprobEntry> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kLength;
  absl::Status status;
  RequestUsage usage;  // valid when finished
};

// Receives a request's events, in order, on the engine's delivery thread (engine/
// event_delivery.h). Must be quick: every request's events share that thread. May call the
// engine's Submit and Cancel (they only enqueue), not WaitIdle or the engine's destructor.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void OnEvent(RequestEvent event) = 0;
};

}  // namespace ridge
