// GPU version of ridge::Sampler::SampleWithUniform plus TopLogprobs/TokenLogprob (see
// engine/sampler.cc, whose rules this follows step for step). One block per row. A row of up to
// kMaxCachedSamplingVocab logits is first copied into shared memory and every stage re-reads that
// copy; a longer row stays in global memory (L2) and is re-read there, so any vocabulary size
// works.
//
// Stages, each a few coalesced passes over the row:
//  1. log-softmax normaliser (max, +inf count, log-sum-exp summed in double) of the raw
//     logits, and the top_logprobs best raw tokens (radix selection of the n-th rank key, then
//     a gather);
//  2. penalties, written in place (in the shared copy when there is one);
//  3. greedy: the smallest rank key; otherwise weights exp((logit - max) / T), recomputed per
//     pass, top-k (radix selection by count), top-p (radix selection by mass), and the draw
//     (a block-wide walk in id order);
//  4. the raw log-probability of the chosen token (read from the global row when the row was
//     cached; otherwise, if it had a penalty, its raw logit is recovered from the penalised
//     one, to a few ulps: the row no longer holds it).
//
// Rank keys are the CPU's: high 32 bits order the logits from best to worst, low 32 bits are
// the id. The radix selections work on the high 32 bits, 8 bits per level, with histograms in
// shared memory; ties within the final 32-bit value are resolved by a walk in id order. All
// walks in id order give each warp a contiguous range of ids, read 32 at a time, so loads stay
// coalesced.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/dynamic_shared_memory.h"
#include "kernels/cuda/token_sampling.h"
#include "kernels/cuda/token_sampling_select.cuh"

namespace ridge::cuda {
namespace sampling {
namespace {

// ---------------------------------------------------------------------------------------------
// Log-probabilities (sampler.cc LogSoftmaxNormalizer / LogProb).

struct Normalizer {
  float max_logit;
  double log_sum_exp;
  int64_t num_positive_inf;
};

template <typename LogitFn>
__device__ Normalizer ComputeNormalizer(int vocab, LogitFn logit_of, Scratch& s) {
  float max_logit = -kInf;
  int64_t num_positive_inf = 0;
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
    const float logit = logit_of(id);
    max_logit = fmaxf(max_logit, logit);
    num_positive_inf += logit == kInf;
  }
  Normalizer norm{BlockReduce(max_logit, MaxOp(), s.warp_float), 0.0,
                  BlockReduce(num_positive_inf, SumOp(), s.warp_int)};
  if (norm.max_logit > -kInf && norm.max_logit < kInf) {
    // exp in float (double exp is ~30 double-precision instructions, and H200 has half as many
    // double units): each term is off by an ulp or two, the log-sum-exp by ~1e-7; the sum itself
    // is kept in double like the CPU's.
    double sum = 0.0;
    for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
      sum += expf(logit_of(id) - norm.max_logit);
    }
    norm.log_sum_exp = log(BlockReduce(sum, SumOp(), s.warp_double));
  }
  return norm;
}

__device__ float LogProb(float logit, const Normalizer& norm) {
  if (norm.max_logit == kInf) {
    return logit == kInf ? static_cast<float>(-log(static_cast<double>(norm.num_positive_inf)))
                         : -kInf;
  }
  if (logit == -kInf) return -kInf;  // also covers "no usable logit at all"
  return static_cast<float>(static_cast<double>(logit) - norm.max_logit - norm.log_sum_exp);
}

// out.top_tokens / top_logprobs: the n best raw tokens (n-th smallest key, then every token at
// or below it, ranked by key), -1 / -inf after them.
template <typename LogitFn>
__device__ void WriteTopLogprobs(int vocab, int n, LogitFn logit_of, const Normalizer& norm,
                                 SampledToken& out, Scratch& s) {
  int count = 0;
  if (n > 0) {
    const uint64_t nth_key = KthSmallestKey(vocab, n, logit_of, s);
    if (threadIdx.x == 0) s.top_count = 0;
    __syncthreads();
    for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
      const uint64_t key = RankKey(logit_of(id), id);
      if (key <= nth_key) {
        const int slot = atomicAdd(&s.top_count, 1);
        if (slot < kMaxSampledTopLogprobs) s.top_keys[slot] = key;
      }
    }
    __syncthreads();
    count = min(s.top_count, kMaxSampledTopLogprobs);
  }
  const int j = threadIdx.x;
  if (j < count) {
    const uint64_t key = s.top_keys[j];
    int rank = 0;
    for (int m = 0; m < count; ++m) rank += s.top_keys[m] < key;
    const int32_t token = TokenOfRankKey(key);
    out.top_tokens[rank] = token;
    out.top_logprobs[rank] = LogProb(logit_of(token), norm);
  } else if (j < kMaxSampledTopLogprobs) {
    out.top_tokens[j] = -1;
    out.top_logprobs[j] = -kInf;
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Penalties (sampler.cc ApplyPenalties), one distinct history token at a time.

__device__ __forceinline__ bool FrequencyPresenceApplies(const SamplingRowParams& p,
                                                         int32_t generated_count) {
  return generated_count > 0 && (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
}

// frequency * count + presence, rounded after each step like the CPU (no fused multiply-add).
__device__ __forceinline__ float FrequencyPresenceTerm(const SamplingRowParams& p,
                                                       int32_t generated_count) {
  return __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(generated_count)),
                   p.presence_penalty);
}

__device__ float Penalise(float logit, const SamplingRowParams& p, int32_t generated_count) {
  const float repetition = p.repetition_penalty;
  if (repetition != 1.0f) logit = logit > 0.0f ? logit / repetition : logit * repetition;
  if (FrequencyPresenceApplies(p, generated_count)) {
    logit -= FrequencyPresenceTerm(p, generated_count);
  }
  return logit;
}

// The raw logit back from a penalised one. Exact up to the rounding of Penalise (a few ulps of
// the larger of the logit and the frequency term): the row no longer holds the raw value.
__device__ float Unpenalise(float logit, const SamplingRowParams& p, int32_t generated_count) {
  if (FrequencyPresenceApplies(p, generated_count)) {
    logit += FrequencyPresenceTerm(p, generated_count);
  }
  const float repetition = p.repetition_penalty;
  if (repetition != 1.0f) logit = logit > 0.0f ? logit * repetition : logit / repetition;
  return logit;
}

__device__ __forceinline__ bool PenaltyApplies(const SamplingRowParams& p,
                                               const PenaltyEntry& entry, int vocab) {
  return entry.token >= 0 && entry.token < vocab &&
         (p.repetition_penalty != 1.0f || FrequencyPresenceApplies(p, entry.generated_count));
}

// ---------------------------------------------------------------------------------------------
// Top-k with k <= kThreads: the kept tokens fit one per thread, so top-p, min-p and the draw run
// on them in shared memory instead of passing over the whole row again.

// Sorts s.candidates[0, n) ascending (n a power of two <= kThreads): a bitonic network.
__device__ void SortCandidates(int n, Scratch& s) {
  const int i = threadIdx.x;
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      __syncthreads();
      const int j = i ^ stride;
      if (i < n && j > i) {
        const bool ascending = (i & size) == 0;
        const uint64_t a = s.candidates[i], b = s.candidates[j];
        if ((a > b) == ascending) {
          s.candidates[i] = b;
          s.candidates[j] = a;
        }
      }
    }
  }
  __syncthreads();
}

// Every thread's inclusive prefix sum of `value` in thread order; *total gets the block's sum.
__device__ double BlockInclusiveSum(double value, double* total, Scratch& s) {
  const double inclusive = WarpInclusiveSum(value);
  if (LaneId() == kWarpSize - 1) s.warp_double[WarpId()] = inclusive;
  __syncthreads();
  double before = 0.0, sum = 0.0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == WarpId()) before = sum;
    sum += s.warp_double[w];
  }
  __syncthreads();
  *total = sum;
  return before + inclusive;
}

// sampler.cc's top-p over the top-k set, min-p and Draw, for the k tokens with key <=
// max_kept_key. Thread i holds the i-th candidate, first in rank order (for top-p), then in id
// order (for the draw); sums differ from the CPU's only in their order.
template <typename LogitFn, typename WeightFn>
__device__ int32_t ChooseAmongTopK(int vocab, uint64_t max_kept_key, const SamplingRowParams& p,
                                   LogitFn logit_of, WeightFn weight_of, Scratch& s) {
  if (threadIdx.x == 0) s.candidate_count = 0;
  __syncthreads();
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
    const uint64_t key = RankKey(logit_of(id), id);
    if (key <= max_kept_key) {
      const int slot = atomicAdd(&s.candidate_count, 1);
      if (slot < kThreads) s.candidates[slot] = key;  // k slots are taken: the keys are distinct
    }
  }
  __syncthreads();
  const int count = min(s.candidate_count, kThreads);
  int n = 1;
  while (n < count) n <<= 1;
  for (int i = count + threadIdx.x; i < n; i += kThreads) s.candidates[i] = ~uint64_t{0};
  SortCandidates(n, s);

  const int i = threadIdx.x;
  const bool holds = i < count;
  const uint64_t key = holds ? s.candidates[i] : ~uint64_t{0};
  const float weight = holds ? weight_of(LogitOfRankHigh(static_cast<uint32_t>(key >> 32))) : 0.0f;
  bool kept = holds;
  if (p.top_p < 1.0f) {  // the shortest prefix in rank order reaching top_p of the mass
    double total;
    const double inclusive = BlockInclusiveSum(weight, &total, s);
    kept = holds && inclusive - weight < static_cast<double>(p.top_p) * total;
  }
  const float drawn = kept && !(weight < p.min_p) ? weight : 0.0f;
  __syncthreads();  // every thread has read its candidate
  if (i < n) {      // re-sort in id order; the weight rides in the low bits
    s.candidates[i] =
        holds ? (static_cast<uint64_t>(TokenOfRankKey(key)) << 32) | __float_as_uint(drawn)
              : ~uint64_t{0};
  }
  SortCandidates(n, s);
  const uint64_t entry = holds ? s.candidates[i] : 0;
  const float w = holds ? __uint_as_float(static_cast<uint32_t>(entry)) : 0.0f;
  const int32_t id = static_cast<int32_t>(entry >> 32);
  double total;
  const double inclusive = BlockInclusiveSum(w, &total, s);
  const double threshold = p.uniform * total;
  // The first id whose cumulative weight exceeds the threshold; rounding can leave the
  // threshold at the total, and the last id with weight is then the pick.
  int64_t first = holds && w > 0.0f && inclusive > threshold ? id : kNoId;
  first = BlockReduce(first, MinOp(), s.warp_int);
  if (first != kNoId) return static_cast<int32_t>(first);
  const int64_t last =
      BlockReduce(holds && w > 0.0f ? int64_t{id} : int64_t{-1}, MaxOp(), s.warp_int);
  return last < 0 ? 0 : static_cast<int32_t>(last);
}

// Token choice on the penalised logits.

template <typename LogitFn>
__device__ int32_t ChooseToken(int vocab, const SamplingRowParams& p, LogitFn logit_of,
                               Scratch& s) {
  uint64_t best_key = ~uint64_t{0};
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
    best_key = MinOp()(best_key, RankKey(logit_of(id), id));
  }
  best_key = BlockReduce(best_key, MinOp(), s.warp_key);
  const float max_logit = LogitOfRankHigh(static_cast<uint32_t>(best_key >> 32));
  if (max_logit == -kInf) return 0;  // no possible token: the documented fallback
  if (!(p.temperature > 0.0f)) return TokenOfRankKey(best_key);  // greedy: lowest id of the max

  const float temperature = p.temperature;
  const bool max_is_inf = max_logit == kInf;
  // sampler.cc ComputeWeights; the best token weighs exactly 1.
  auto weight_of = [=](float logit) {
    if (max_is_inf) return logit == kInf ? 1.0f : 0.0f;
    return expf((logit - max_logit) / temperature);
  };

  uint64_t max_kept_key = ~uint64_t{0};
  const bool top_k_on = p.top_k > 0 && p.top_k < vocab;
  const bool top_p_on = p.top_p < 1.0f;
  if (top_k_on) max_kept_key = KthSmallestKey(vocab, p.top_k, logit_of, s);
  if (top_k_on && p.top_k <= kThreads) {
    return ChooseAmongTopK(vocab, max_kept_key, p, logit_of, weight_of, s);
  }
  if (top_p_on) max_kept_key = TopPMaxKey(vocab, max_kept_key, p.top_p, logit_of, weight_of, s);
  const bool cut_by_rank = top_k_on || top_p_on;

  // sampler.cc Draw: min-p and the rank cut zero weights, then the first token whose cumulative
  // weight exceeds uniform * total.
  const float min_p = p.min_p;
  auto draw_weight = [&](int64_t id) {
    const float logit = logit_of(id);
    const float weight = weight_of(logit);
    if (weight < min_p || (cut_by_rank && RankKey(logit, id) > max_kept_key)) return 0.0;
    return static_cast<double>(weight);
  };
  const double uniform = p.uniform;
  int64_t token = FirstCrossing(
      vocab, draw_weight, 0.0, [uniform](double total) { return uniform * total; },
      /*strict=*/true, s);
  // Rounding can leave the threshold at the total: the last token with weight is then the pick.
  if (token < 0)
    token = LastIdWhere(
        vocab, [&](int64_t id) { return draw_weight(id) > 0.0; }, s);
  return token < 0 ? 0 : static_cast<int32_t>(token);
}

// Rows of up to kMaxCachedSamplingVocab logits are copied into shared memory first, so the
// dozen or more passes over the row read shared memory instead of L2 (and the global row stays
// raw). Larger vocabularies work on the global row in place.
__global__ void __launch_bounds__(kThreads)
    TokenSamplingKernel(TokenSamplingArgs args, bool cache_row) {
  __shared__ Scratch s;
  extern __shared__ float cached_row[];
  const int64_t row_index = blockIdx.x;
  float* const global_row = args.logits + row_index * args.row_stride;
  float* row = global_row;
  if (cache_row) {
    for (int i = threadIdx.x; i < args.vocab_size; i += kThreads) cached_row[i] = global_row[i];
    __syncthreads();
    row = cached_row;
  }
  const SamplingRowParams& p = args.params[row_index];
  SampledToken& out = args.out[row_index];
  const int vocab = args.vocab_size;
  // Before the penalties these are the raw logits, after them the penalised ones.
  auto logit_of = [row](int64_t id) { return CleanLogit(row[id]); };

  // 1. Log-probabilities of the raw logits.
  // (Skipped when not asked for: two passes over the row and the top list's selection.)
  const bool want_logprobs = p.logprobs != 0 || p.top_logprobs > 0;
  Normalizer norm{-kInf, 0.0, 0};
  if (want_logprobs) norm = ComputeNormalizer(vocab, logit_of, s);
  const int num_top = min(max(p.top_logprobs, 0), min(kMaxSampledTopLogprobs, vocab));
  WriteTopLogprobs(vocab, num_top, logit_of, norm, out, s);

  // 2. Penalties, in place; the barrier publishes them to the whole block.
  const PenaltyEntry* const entries = args.penalties + p.penalty_begin;
  // (WriteTopLogprobs ended with a barrier: every raw read is done before these writes.)
  for (int e = threadIdx.x; e < p.penalty_count; e += kThreads) {
    const PenaltyEntry entry = entries[e];
    if (PenaltyApplies(p, entry, vocab)) {
      row[entry.token] = Penalise(CleanLogit(row[entry.token]), p, entry.generated_count);
    }
  }
  __syncthreads();

  // 3. The token (a scored row's is given, its vocabulary checked by the host).
  const int32_t token = p.scored != 0 ? p.scored_token : ChooseToken(vocab, p, logit_of, s);

  // 4. Its raw log-probability: the global row is still raw when the row was cached; else it
  // holds the penalised value if the token had a penalty.
  if (threadIdx.x == 0) s.chosen_raw_logit = CleanLogit(global_row[token]);
  __syncthreads();
  if (!cache_row) {
    for (int e = threadIdx.x; e < p.penalty_count; e += kThreads) {
      const PenaltyEntry entry = entries[e];
      if (entry.token == token && PenaltyApplies(p, entry, vocab)) {
        s.chosen_raw_logit = Unpenalise(CleanLogit(global_row[token]), p, entry.generated_count);
      }
    }
    __syncthreads();
  }
  // 5. A scored row's rank (its row has no penalties: the logits are raw), as vLLM counts it.
  int64_t rank = 0;
  if (p.scored != 0) {
    const float chosen = s.chosen_raw_logit;
    int64_t at_least = 0;
    for (int64_t id = threadIdx.x; id < vocab; id += kThreads) at_least += logit_of(id) >= chosen;
    rank = BlockReduce(at_least, SumOp(), s.warp_int);
  }
  if (threadIdx.x == 0) {
    out.token = token;
    out.logprob = want_logprobs ? LogProb(s.chosen_raw_logit, norm) : 0.0f;
    out.rank = static_cast<int32_t>(rank);
  }
}

}  // namespace
}  // namespace sampling

size_t TokenSamplingSharedBytes(int vocab_size) {
  const size_t cache = vocab_size <= kMaxCachedSamplingVocab ? vocab_size * sizeof(float) : 0;
  return sizeof(sampling::Scratch) + cache;
}

cudaError_t LaunchTokenSampling(const TokenSamplingArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0) return cudaSuccess;
  if (args.num_rows < 0 || args.vocab_size <= 0 || args.row_stride < args.vocab_size) {
    return cudaErrorInvalidValue;
  }
  const bool cache_row = args.vocab_size <= kMaxCachedSamplingVocab;
  const size_t cache_bytes = cache_row ? args.vocab_size * sizeof(float) : 0;
  return LaunchWithDynamicSharedMemory(sampling::TokenSamplingKernel, args.num_rows,
                                       sampling::kThreads, cache_bytes, stream, args, cache_row);
}

}  // namespace ridge::cuda
