// Causal GQA softmax attention on the GPU for every query row of a step, over a full-attention
// layer's KV blocks (bf16) or a sliding-window layer's ring plus the step's own rows (fp32):
// flash-decoding. A block takes one (row, kv head, split of the row's keys) and reads each key
// and value once for all the query heads of its group; with more than one split, a second kernel
// merges the splits' partial softmaxes. Decode and prefill rows alike (a prefill row is a query
// at its own position).
//
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_rows.h"

namespace ridge::cuda {

struct PagedAttentionArgs {
  AttentionStep step;
  int32_t q_heads = 0, kv_heads = 0, head_dim = 0;  // head_dim 64 or 128; q_heads / kv_heads
                                                    // 1, 2, 4 or 8
  // [rows, proj_stride]: q [Hq*D] (normalised, rotated), then k and v [Hkv*D] each.
  const float* proj = nullptr;
  int64_t proj_stride = 0;
  float scale = 0.0f;  // softmax scale, usually head_dim^-0.5
  // Exactly one of the two: paged.cache set (full attention) or ring.state_pool set (sliding
  // window: keys before the step from the ring, the step's own from proj).
  PagedKv paged;
  WindowKv ring;
  // Keys per split (a multiple of 64) and the most splits a row may need: the grid's width.
  int32_t split_keys = 0, max_splits = 1;
  // Scratch for max_splits > 1: [rows, q_heads, max_splits] floats twice, then
  // [rows, q_heads, max_splits, head_dim] floats.
  float* partials = nullptr;
  void* out_bf16 = nullptr;  // [rows, out_stride]: head h at columns [h*D, (h+1)*D)
  int64_t out_stride = 0;
};

// Floats of scratch PagedAttentionArgs::partials needs.
int64_t PagedAttentionScratchFloats(int64_t rows, int64_t q_heads, int64_t head_dim,
                                    int64_t max_splits);

// The splits for rows of at most `max_keys` keys so that the grid fills `sm_count`
// multiprocessors a few times over; returns max_splits and sets *split_keys.
int32_t PickAttentionSplits(int64_t rows, int64_t kv_heads, int64_t max_keys, int32_t sm_count,
                            int32_t* split_keys);

bool PagedAttentionSupports(int32_t q_heads, int32_t kv_heads, int32_t head_dim);

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace ridge::cuda
