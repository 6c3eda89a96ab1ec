// Picks each row's next token on the GPU, so a sampled step copies a few bytes per sequence to
// the host instead of a row of logits. The rule is the CPU sampler's (sampling/sampler.h), step
// for step: NaN logits read as -inf; penalties (repetition over the distinct tokens of prompt +
// generated, then frequency and presence over the generated counts); temperature 0 = the
// lowest id among the maxima; otherwise weights exp((logit - max) / T) (the +inf tokens share
// the mass when the maximum is +inf), top-k and top-p by rank (descending logit, then lower id),
// min-p on the weight, and a draw walking the token ids in order with the uniform the host took
// from the sequence's random stream. Sums are done in double, in another order than on the CPU,
// so the two agree except where a cumulative sum lies within rounding of its threshold.
//
// Log-probabilities are the log-softmax of the raw logits (before penalties and temperature),
// as the CPU path reports them.
//
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ridge::cuda {

inline constexpr int kMaxSampledTopLogprobs = 20;

// Rows of up to this many logits are sampled from a copy in shared memory and left untouched;
// longer rows are read from global memory and get the penalties written in place.
inline constexpr int kMaxCachedSamplingVocab = 53 * 1024;

// One distinct token of a row's history: the repetition penalty applies to every entry (the
// token occurs in the prompt or among the generated tokens); frequency and presence apply
// when generated_count > 0.
struct PenaltyEntry {
  int32_t token;
  int32_t generated_count;
};

struct SamplingRowParams {
  float temperature;  // 0 = greedy
  int32_t top_k;      // 0 or >= vocab_size = off
  float top_p;        // 1 = off
  float min_p;        // 0 = off
  float repetition_penalty, presence_penalty, frequency_penalty;
  int32_t penalty_begin, penalty_count;  // entries of TokenSamplingArgs::penalties
  int32_t logprobs;                      // 1: return the chosen token's log-probability
  int32_t top_logprobs;                  // 0..kMaxSampledTopLogprobs alternatives (implies 1)
  double uniform;                        // in [0, 1); used when temperature > 0
  // Nonzero: the row is scored, not sampled: its token is scored_token (a prompt's next token),
  // with its log-probability, rank and alternatives as for a sampled token. Zero (the value of a
  // zeroed row): sampled.
  int32_t scored;
  int32_t scored_token;
};

struct SampledToken {
  int32_t token;
  float logprob;  // of `token`, raw log-softmax
  int32_t rank;   // scored rows: tokens whose raw logit is >= the token's
  int32_t top_tokens[kMaxSampledTopLogprobs];
  float top_logprobs[kMaxSampledTopLogprobs];  // most likely first, lower id first on ties
};

struct TokenSamplingArgs {
  float* logits;       // [num_rows, row_stride]; may be rewritten in place (penalties applied)
  int64_t row_stride;  // floats between rows, >= vocab_size
  int32_t vocab_size;
  int32_t num_rows;
  const SamplingRowParams* params;  // [num_rows], device
  const PenaltyEntry* penalties;    // device; rows index it by penalty_begin/penalty_count
  SampledToken* out;                // [num_rows], device
};

// One block per row. Enqueues only (capturable).
cudaError_t LaunchTokenSampling(const TokenSamplingArgs& args, cudaStream_t stream);

// Shared memory (static and dynamic) a block needs for this vocabulary size: a device must
// offer that much per block, opted in.
size_t TokenSamplingSharedBytes(int vocab_size);

}  // namespace ridge::cuda
