// What the GPU's attention kernels know of a step (kernels/cuda/qk_rope.h,
// kernels/cuda/paged_attention.h): which sequence each row belongs to and where the sequences'
// keys and values live. Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cstdint>

namespace ridge::cuda {

// Rows [row_begin[s], row_begin[s] + row_count[s]) are sequence s's tokens at positions
// start_position[s], start_position[s] + 1, ...
struct AttentionStep {
  int32_t rows = 0;
  const int32_t* row_sequence = nullptr;  // [rows]
  const int32_t* row_begin = nullptr;     // [sequences]
  const int32_t* row_count = nullptr;     // [sequences]
  const int32_t* start_position = nullptr;
  // Paged layers: sequence s's block table is block_tables[table_begin[s] ...]; entry i holds
  // positions [i * block_size, (i + 1) * block_size).
  const int32_t* table_begin = nullptr;
  const int32_t* block_tables = nullptr;
  // Sliding-window layers: sequence s's ring lies in state slot slot[s].
  const int32_t* slot = nullptr;
};

// A full-attention layer's keys and values in the KV blocks (bf16): block b's part of the layer
// is at cache + b * block_elements + layer_offset, keys [kv_heads, block_size, head_dim], then
// values alike.
struct PagedKv {
  void* cache = nullptr;
  int64_t block_elements = 0;
  int64_t layer_offset = 0;
  int32_t block_size = 0;
};

// A sliding-window layer's last `window` keys and values (fp32) in the state slot: position p
// at ring row p % window; slot s's ring starts at state_pool + s * slot_floats + ring_offset,
// keys [window, kv_heads * head_dim], then values alike.
struct WindowKv {
  float* state_pool = nullptr;
  int64_t slot_floats = 0;
  int64_t ring_offset = 0;
  int32_t window = 0;
};

}  // namespace ridge::cuda
