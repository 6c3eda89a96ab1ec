// Qwen3 attention's per-row prologue on the GPU: per-head RMSNorm of q and k, RoPE
// (rotate-half, the angles in double precision as models/rope.cc computes them), in place in
// the projection rows, and the new keys and values written into the layer's KV blocks (full
// attention), or into the sliding-window ring after the layer has attended (RingWrite).
//
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_rows.h"

namespace ridge::cuda {

struct QkRopeArgs {
  AttentionStep step;
  int32_t q_heads = 0, kv_heads = 0, head_dim = 0;  // head_dim 64 or 128
  // [rows, proj_stride]: q [Hq*D], k [Hkv*D], v [Hkv*D]; q and k normalised and rotated in place.
  float* proj = nullptr;
  int64_t proj_stride = 0;
  const float* q_norm = nullptr;  // [D]
  const float* k_norm = nullptr;  // [D]
  float norm_eps = 1e-6f;
  const double* inv_freq = nullptr;  // [D / 2]
  float attention_factor = 1.0f;     // multiplies cos and sin
  PagedKv kv;                        // kv.cache null: write nothing (sliding-window layers)
};

cudaError_t LaunchQkRope(const QkRopeArgs& args, cudaStream_t stream);

// A sliding-window layer's ring advanced past the step: each sequence's rows at the last
// `window` positions of the step copied (k and v, fp32) into ring row position % window.
struct RingWriteArgs {
  AttentionStep step;
  int32_t kv_width = 0;         // Hkv * D
  const float* proj = nullptr;  // k at column k_column, v right after it
  int64_t proj_stride = 0;
  int32_t k_column = 0;
  WindowKv ring;
};

cudaError_t LaunchRingWrite(const RingWriteArgs& args, cudaStream_t stream);

}  // namespace ridge::cuda
