// What the engine accepts: its options, and each request against the model, the options and
// the memory (its context, the KV cache), with errors that name the field.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/engine.h"

namespace ridge {

absl::Status ValidateEngineOptions(const EngineOptions& o) {
  if (o.max_slots < 1 || o.max_slots > 1 << 20) {
    return absl::InvalidArgumentError(absl::StrCat("slots ", o.max_slots, " must be 1 to 2^20"));
  }
  if (o.max_waiting < 0) return absl::InvalidArgumentError("max waiting must be >= 0");
  if (o.prefix_cache_slots < 0 || o.prefix_cache_slots > 1 << 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix cache slots ", o.prefix_cache_slots, " must be 0 to 2^20"));
  }
  if (o.prefill_token_budget < 1) {
    return absl::InvalidArgumentError("prefill token budget must be >= 1");
  }
  if (o.max_solver_iterations < 1 || o.max_solver_iterations > kSolverIterationLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("max solver iterations must be 1 to ", kSolverIterationLimit));
  }
  RETURN_IF_ERROR(ValidateSolverOptions(o.default_solver, o.max_solver_iterations));
  return absl::OkStatus();
}

absl::Status Engine::Validate(const EngineRequest& request) const {
  const int64_t vocab = backend_->spec().vocab_size;
  if (request.prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  if (static_cast<int64_t>(request.prompt.size()) > options_.max_prompt_tokens) {
    return absl::OutOfRangeError(absl::StrCat("prompt: ", request.prompt.size(),
                                              " tokens is more than the limit of ",
                                              options_.max_prompt_tokens));
  }
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt: token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (request.sampling.max_tokens > options_.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens: ", request.sampling.max_tokens,
                                                   " is more than the limit of ",
                                                   options_.max_new_tokens));
  }
  const int64_t tokens = static_cast<int64_t>(request.prompt.size()) + request.sampling.max_tokens;
  const int64_t context = backend_->spec().max_position_embeddings;  // 0: positions unbounded
  if (context > 0 && tokens > context) {
    return absl::OutOfRangeError(absl::StrCat(
        "max_tokens: the prompt (", request.prompt.size(), " tokens) plus max_tokens (",
        request.sampling.max_tokens, ") is more than the model's context of ", context,
        " tokens (max_position_embeddings)"));
  }
  const int64_t peak = memory_.layout().BlocksFor(tokens);
  if (peak > memory_.pools().blocks().total()) {
    const int64_t total = memory_.pools().blocks().total();
    const int64_t block_size = memory_.layout().block_size;
    return absl::OutOfRangeError(absl::StrCat(
        "max_tokens: the prompt (", request.prompt.size(), " tokens) plus max_tokens (",
        request.sampling.max_tokens, ") needs ", peak, " KV blocks of ", block_size,
        " tokens; the KV cache holds ", total, " blocks (", total * block_size, " tokens) in all"));
  }
  if (request.top_logprobs < 0 || request.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs: ", request.top_logprobs, " must be 0 to ", kMaxTopLogprobs));
  }
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_logprobs: ", request.prompt_logprobs,
                                                   " must be -1 (none) to ", kMaxTopLogprobs));
  }
  if (request.prompt_logprobs >= 0 && !request.session_id.empty()) {
    return absl::InvalidArgumentError(
        "prompt_logprobs: a request that continues a session (session_id) does not compute its "
        "history, so it cannot score its prompt");
  }
  if (request.solver.has_value()) {
    RETURN_IF_ERROR(ValidateSolverOptions(*request.solver, options_.max_solver_iterations));
  }
  if (!request.session_id.empty()) {
    RETURN_IF_ERROR(ValidateSessionId(request.session_id));
    if (SessionLimit() < 1) {
      return absl::FailedPreconditionError(
          "session_id: sessions live in the prefix cache, and this server runs without one "
          "(--no-prefix-cache or too little --prefix-cache-memory)");
    }
  }
  if (request.snapshot_points.size() > kMaxSnapshotPoints ||
      !std::is_sorted(request.snapshot_points.begin(), request.snapshot_points.end()) ||
      (!request.snapshot_points.empty() &&
       (request.snapshot_points.front() < 1 ||
        request.snapshot_points.back() >= static_cast<int64_t>(request.prompt.size())))) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot_points: at most ", kMaxSnapshotPoints,
                     " increasing positions inside the prompt (0 < p < its length)"));
  }
  if (request.cache_salt.size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cache_salt: ", request.cache_salt.size(),
                                                   " bytes is more than the limit of ",
                                                   kMaxCacheSaltBytes));
  }
  return absl::OkStatus();
}

void Engine::FitDefaultMaxTokens(EngineRequest& request) const {
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  int64_t room = request.sampling.max_tokens;
  const int64_t context = backend_->spec().max_position_embeddings;
  if (context > 0) room = std::min(room, context - prompt);
  const KvLayout& kv = memory_.layout();
  if (!kv.empty()) {
    room = std::min(room, memory_.pools().blocks().total() * kv.block_size - prompt);
  }
  // Below one token the request cannot run at all: Validate refuses it with the limits named.
  if (room >= 1) request.sampling.max_tokens = static_cast<int32_t>(room);
}

}  // namespace ridge
