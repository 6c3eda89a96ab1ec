// Block-wide building blocks of the token-sampling kernel (token_sampling.cu): rank keys (the
// CPU sampler's RankKey), warp and block reductions, and radix selections over rank keys (the
// k-th smallest key, the top-p boundary, the first id whose running sum crosses a threshold).
// Every function here assumes a block of kThreads threads and one Scratch in shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/token_sampling.h"

namespace ridge::cuda::sampling {

constexpr int kThreads = 1024;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

// Radix selection over the 32-bit logit part of a rank key: 4 levels of 8 bits.
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr int kLevels = 32 / kDigitBits;
constexpr int kBinsPerLane = kBins / kWarpSize;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kNoId = std::numeric_limits<int64_t>::max();

struct Scratch {
  unsigned count_hist[kBins];  // radix selection by count (top-k, top list)
  double mass_hist[kBins];     // radix selection by mass (top-p)
  // One slot per warp for block reductions.
  float warp_float[kWarps];
  double warp_double[kWarps];
  int64_t warp_int[kWarps];
  uint64_t warp_key[kWarps];
  // The bin SelectBin chose and the cumulative count or mass of the bins before it.
  int selected_bin;
  double selected_before;
  double top_p_target;
  // Top list gather.
  uint64_t top_keys[kMaxSampledTopLogprobs];
  int top_count;
  // The top-k tokens when k <= kThreads (ChooseAmongTopK): rank keys, later (id, weight) pairs.
  uint64_t candidates[kThreads];
  int candidate_count;
  float chosen_raw_logit;
};

__device__ __forceinline__ int LaneId() { return threadIdx.x % kWarpSize; }
__device__ __forceinline__ int WarpId() { return threadIdx.x / kWarpSize; }

// ---------------------------------------------------------------------------------------------
// Rank keys (sampler.cc RankKey).

__device__ __forceinline__ float CleanLogit(float logit) { return isnan(logit) ? -kInf : logit; }

// The high half of RankKey: ascending values are descending logits. -0 counts as +0 (the CPU
// adds 0.0f; done on the bits here so no compiler or flush mode can change it).
__device__ __forceinline__ uint32_t RankHigh(float logit) {
  uint32_t bits = __float_as_uint(logit);
  if (bits == 0x80000000u) bits = 0;
  const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return ~ordered;
}

// The logit RankHigh came from (+0 for -0).
__device__ __forceinline__ float LogitOfRankHigh(uint32_t high) {
  const uint32_t ordered = ~high;
  return __uint_as_float((ordered & 0x80000000u) != 0 ? (ordered & 0x7fffffffu) : ~ordered);
}

__device__ __forceinline__ uint64_t RankKey(float logit, int64_t token) {
  return (static_cast<uint64_t>(RankHigh(logit)) << 32) | static_cast<uint32_t>(token);
}

__device__ __forceinline__ int32_t TokenOfRankKey(uint64_t key) {
  return static_cast<int32_t>(key & 0xffffffffu);
}

// ---------------------------------------------------------------------------------------------
// Warp and block primitives. Block functions must be called by every thread of the block (never
// under a condition that differs between threads); each ends with a barrier, so the shared
// memory it used may be reused right after it returns.

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct MinOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};

template <typename T, typename Op>
__device__ T WarpReduce(T value, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    value = op(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

// Every thread gets op over all threads' values, combined in a fixed order.
template <typename T, typename Op>
__device__ T BlockReduce(T value, Op op, T* warp_slots) {
  value = WarpReduce(value, op);
  if (LaneId() == 0) warp_slots[WarpId()] = value;
  __syncthreads();
  T result = warp_slots[0];
  for (int w = 1; w < kWarps; ++w) result = op(result, warp_slots[w]);
  __syncthreads();
  return result;
}

__device__ inline double WarpInclusiveSum(double value) {
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const double other = __shfl_up_sync(kFullMask, value, offset);
    if (LaneId() >= offset) value += other;
  }
  return value;
}

// The sum of `value` over the lanes of `peers` (this lane's __match_any_sync group), valid in
// the group's lowest lane. A tree over each group's members in lane order: each round, every
// member adds the partial sum of the next remaining member, and members at odd positions drop
// out. All 32 lanes must call it.
__device__ inline double SumOverPeers(unsigned peers, double value) {
  const int lane = LaneId();
  unsigned position = __popc(peers & ((1u << lane) - 1));  // members below this lane
  unsigned higher = peers & ~((2u << lane) - 1);           // members above it (2u << 31 == 0)
  while (__any_sync(kFullMask, higher != 0)) {
    const int next = __ffs(higher) - 1;  // -1 when none is left
    const double other = __shfl_sync(kFullMask, value, next >= 0 ? next : lane);
    if (next >= 0) value += other;
    higher &= ~__ballot_sync(kFullMask, (position & 1) != 0);
    position >>= 1;
  }
  return value;
}

// Histogram updates aggregated per warp: lanes with the same bin add once, so the shared-memory
// atomics never conflict within a warp (logits crowd into few bins at the top levels). bin < 0
// adds nothing. All 32 lanes must call them.
__device__ inline void CountInBin(unsigned* hist, int bin) {
  if (__all_sync(kFullMask, bin < 0)) return;
  const unsigned peers = __match_any_sync(kFullMask, bin);
  if (bin >= 0 && LaneId() == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
}

__device__ inline void AddMassToBin(double* hist, int bin, double mass) {
  if (__all_sync(kFullMask, bin < 0)) return;
  const unsigned peers = __match_any_sync(kFullMask, bin);
  mass = SumOverPeers(peers, mass);
  if (bin >= 0 && LaneId() == __ffs(peers) - 1) atomicAdd(&hist[bin], mass);
}

// Warp 0 only (all its lanes): the first bin of `hist` (in rank order) at which the cumulative
// value, starting from `base`, reaches `target`, published with the cumulative value before it
// in s.selected_bin / s.selected_before. When rounding keeps the sum below the target it takes
// the last non-empty bin, so the bin chosen is never empty.
template <typename T>
__device__ void SelectBin(const T* hist, double base, double target, Scratch& s) {
  const int lane = LaneId();
  const int first_bin = lane * kBinsPerLane;
  double lane_sum = 0.0;
  for (int j = 0; j < kBinsPerLane; ++j) lane_sum += static_cast<double>(hist[first_bin + j]);
  const double inclusive = WarpInclusiveSum(lane_sum);
  double exclusive = __shfl_up_sync(kFullMask, inclusive, 1);
  if (lane == 0) exclusive = 0.0;

  double cumulative = base + exclusive;
  int crossing = -1, last_nonempty = -1;
  double before_crossing = 0.0, before_last = 0.0;
  for (int j = 0; j < kBinsPerLane; ++j) {
    const double value = static_cast<double>(hist[first_bin + j]);
    if (value > 0.0) {
      if (crossing < 0 && cumulative + value >= target) {
        crossing = first_bin + j;
        before_crossing = cumulative;
      }
      last_nonempty = first_bin + j;
      before_last = cumulative;
    }
    cumulative += value;
  }
  const unsigned crossed = __ballot_sync(kFullMask, crossing >= 0);
  const unsigned nonempty = __ballot_sync(kFullMask, last_nonempty >= 0);
  int bin = 0;
  double before = base;
  if (crossed != 0) {
    const int source = __ffs(crossed) - 1;
    bin = __shfl_sync(kFullMask, crossing, source);
    before = __shfl_sync(kFullMask, before_crossing, source);
  } else if (nonempty != 0) {
    const int source = kWarpSize - 1 - __clz(nonempty);
    bin = __shfl_sync(kFullMask, last_nonempty, source);
    before = __shfl_sync(kFullMask, before_last, source);
  }
  if (lane == 0) {
    s.selected_bin = bin;
    s.selected_before = before;
  }
}

// The ids [begin, end) of this warp's share of the row for walks in id order: contiguous, in
// warp order, each a multiple of 32 long except the last.
struct IdRange {
  int64_t begin, end;
};

__device__ inline IdRange WarpIdRange(int vocab) {
  const int64_t per_warp =
      ((static_cast<int64_t>(vocab) + kWarps - 1) / kWarps + kWarpSize - 1) / kWarpSize * kWarpSize;
  const int64_t begin = WarpId() * per_warp;
  const int64_t end = begin + per_warp;
  return {begin < vocab ? begin : vocab, end < vocab ? end : vocab};
}

__device__ __forceinline__ bool Reaches(double cumulative, double threshold, bool strict) {
  return strict ? cumulative > threshold : cumulative >= threshold;
}

// Walks the tokens in id order summing value(id) >= 0 from `start`, and returns the first id
// with a positive value at which the sum reaches threshold_of(total) (total: start + the sum of
// all values; reaching: > when strict, else >=), or -1 if rounding leaves it short.
template <typename ValueFn, typename ThresholdFn>
__device__ int64_t FirstCrossing(int vocab, ValueFn value, double start, ThresholdFn threshold_of,
                                 bool strict, Scratch& s) {
  const int lane = LaneId();
  const IdRange range = WarpIdRange(vocab);
  double warp_sum = 0.0;
  for (int64_t id = range.begin + lane; id < range.end; id += kWarpSize) warp_sum += value(id);
  warp_sum = WarpReduce(warp_sum, SumOp());
  if (lane == 0) s.warp_double[WarpId()] = warp_sum;
  __syncthreads();
  // The running sum at this warp's range, in warp (= id) order.
  double total = start, before = start, after = start;
  for (int w = 0; w < kWarps; ++w) {
    if (w == WarpId()) before = total;
    total += s.warp_double[w];
    if (w == WarpId()) after = total;
  }
  __syncthreads();
  const double threshold = threshold_of(total);

  // Only the warps whose range ends at or past the threshold walk (later ones stop at their
  // first positive value; the minimum over warps below keeps the first crossing).
  int64_t found = kNoId;
  if (Reaches(after, threshold, strict)) {
    double running = before;
    for (int64_t base = range.begin; base < range.end; base += kWarpSize) {  // warp-uniform
      const int64_t id = base + lane;
      const double v = id < range.end ? value(id) : 0.0;
      const double inclusive = WarpInclusiveSum(v);
      const unsigned hits =
          __ballot_sync(kFullMask, v > 0.0 && Reaches(running + inclusive, threshold, strict));
      if (hits != 0) {
        found = base + __ffs(hits) - 1;
        break;
      }
      running += __shfl_sync(kFullMask, inclusive, kWarpSize - 1);
    }
  }
  found = BlockReduce(found, MinOp(), s.warp_int);
  return found == kNoId ? -1 : found;
}

// The highest id with pred(id), or -1.
template <typename Pred>
__device__ int64_t LastIdWhere(int vocab, Pred pred, Scratch& s) {
  int64_t last = -1;
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
    if (pred(id)) last = id;
  }
  return BlockReduce(last, MaxOp(), s.warp_int);
}

// The k-th smallest rank key (1 <= k <= vocab) of the logits logit_of(id): radix selection of
// its 32-bit logit part by counts, then the (k - better)-th token with that logit in id order.
template <typename LogitFn>
__device__ uint64_t KthSmallestKey(int vocab, int k, LogitFn logit_of, Scratch& s) {
  uint32_t prefix = 0;  // the digits chosen so far
  double before = 0.0;  // tokens with a smaller logit part than any in the chosen bins
  for (int level = 0; level < kLevels; ++level) {
    const int shift = 32 - kDigitBits * (level + 1);
    const uint32_t fixed_mask = level == 0 ? 0u : ~0u << (shift + kDigitBits);
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.count_hist[b] = 0;
    __syncthreads();
    for (int64_t base = 0; base < vocab; base += kThreads) {  // uniform trip count
      const int64_t id = base + threadIdx.x;
      int bin = -1;
      if (id < vocab) {
        const uint32_t high = RankHigh(logit_of(id));
        if (((high ^ prefix) & fixed_mask) == 0) bin = (high >> shift) & (kBins - 1);
      }
      CountInBin(s.count_hist, bin);
    }
    __syncthreads();
    if (WarpId() == 0) SelectBin(s.count_hist, before, k, s);
    __syncthreads();
    prefix |= static_cast<uint32_t>(s.selected_bin) << shift;
    before = s.selected_before;
  }
  // Counts are exact, so the walk always finds the token; the fallback only guards the bounds.
  auto with_boundary = [&](int64_t id) { return RankHigh(logit_of(id)) == prefix; };
  int64_t id = FirstCrossing(
      vocab, [&](int64_t i) { return with_boundary(i) ? 1.0 : 0.0; }, before,
      [k](double) { return static_cast<double>(k); }, /*strict=*/false, s);
  if (id < 0) id = LastIdWhere(vocab, with_boundary, s);
  return (static_cast<uint64_t>(prefix) << 32) | static_cast<uint32_t>(id < 0 ? 0 : id);
}

// sampler.cc KeepTopP over the tokens with key <= max_kept_key: the largest key of the shortest
// prefix in rank order whose weight reaches top_p * (their total weight). Radix selection by
// mass, then a walk in id order among the tokens of the boundary logit (which share a weight).
template <typename LogitFn, typename WeightFn>
__device__ uint64_t TopPMaxKey(int vocab, uint64_t max_kept_key, float top_p, LogitFn logit_of,
                               WeightFn weight_of, Scratch& s) {
  uint32_t prefix = 0;
  double before = 0.0;  // mass of the kept tokens better than any in the chosen bins
  double target = 0.0;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = 32 - kDigitBits * (level + 1);
    const uint32_t fixed_mask = level == 0 ? 0u : ~0u << (shift + kDigitBits);
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.mass_hist[b] = 0.0;
    __syncthreads();
    for (int64_t base = 0; base < vocab; base += kThreads) {  // uniform trip count
      const int64_t id = base + threadIdx.x;
      int bin = -1;
      double mass = 0.0;
      if (id < vocab) {
        const float logit = logit_of(id);
        const uint64_t key = RankKey(logit, id);
        const uint32_t high = static_cast<uint32_t>(key >> 32);
        if (key <= max_kept_key && ((high ^ prefix) & fixed_mask) == 0) {
          bin = (high >> shift) & (kBins - 1);
          mass = weight_of(logit);
        }
      }
      AddMassToBin(s.mass_hist, bin, mass);
    }
    __syncthreads();
    if (WarpId() == 0) {
      if (level == 0) {
        double lane_sum = 0.0;
        for (int j = 0; j < kBinsPerLane; ++j) lane_sum += s.mass_hist[LaneId() * kBinsPerLane + j];
        target = static_cast<double>(top_p) * WarpReduce(lane_sum, SumOp());
        if (LaneId() == 0) s.top_p_target = target;
      }
      SelectBin(s.mass_hist, before, target, s);
    }
    __syncthreads();
    target = s.top_p_target;
    prefix |= static_cast<uint32_t>(s.selected_bin) << shift;
    before = s.selected_before;
  }
  auto in_boundary = [&](int64_t id) {
    const float logit = logit_of(id);
    return RankKey(logit, id) <= max_kept_key && RankHigh(logit) == prefix;
  };
  int64_t id = FirstCrossing(
      vocab,
      [&](int64_t i) { return in_boundary(i) ? static_cast<double>(weight_of(logit_of(i))) : 0.0; },
      before, [target](double) { return target; }, /*strict=*/false, s);
  if (id < 0) id = LastIdWhere(vocab, in_boundary, s);  // rounding: keep the whole boundary
  if (id < 0) return max_kept_key;                      // unreachable: the boundary is not empty
  return (static_cast<uint64_t>(prefix) << 32) | static_cast<uint32_t>(id);
}

}  // namespace ridge::cuda::sampling
