// The short causal depthwise convolution of Gated KalmaNet's q, k and v projections on the GPU,
// SiLU after, continuing each sequence from the raw inputs of its previous tokens kept in its
// state slot (the GPU form of kernels/short_convolution.h's CausalConvSilu).
//
// One thread per (sequence, channel) walks the sequence's tokens with the window in registers,
// then leaves the new tail in the slot, so no thread reads a tail another one writes.
//
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ridge::cuda {

inline constexpr int32_t kMaxConvWidth = 8;

struct CausalConvArgs {
  int32_t num_sequences = 0;
  const int32_t* row_begin = nullptr;  // [num_sequences]
  const int32_t* row_count = nullptr;  // [num_sequences]
  const int32_t* slot = nullptr;       // [num_sequences]
  int32_t channels = 0;
  int32_t width = 0;  // 1..kMaxConvWidth
  // [rows, in_stride]: the raw inputs at columns [0, channels).
  const float* in = nullptr;
  int64_t in_stride = 0;
  const float* weight = nullptr;  // [channels, width]: weight[c, width - 1] takes the current token
  // Slot s's tail ([width - 1, channels], oldest first) at state_pool + s * slot_floats +
  // tail_offset.
  float* state_pool = nullptr;
  int64_t slot_floats = 0;
  int64_t tail_offset = 0;
  float* out = nullptr;  // [rows, out_stride]: silu(convolution)
  int64_t out_stride = 0;
};

cudaError_t LaunchCausalConvSilu(const CausalConvArgs& args, cudaStream_t stream);

}  // namespace ridge::cuda
