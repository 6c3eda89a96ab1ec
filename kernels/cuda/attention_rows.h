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

// A full-attention layer's keys and values in the KV blocks: block b's part of the layer is at
// cache + b * block_elements + layer_offset (in elements of the cache's type).
// - bf16 (fp8 false): keys [kv_heads, block_size, head_dim], then values alike.
// - fp8 (e4m3; block_elements and layer_offset count bytes): keys [kv_heads, block_size,
//   head_dim], values alike, then the keys' scales [kv_heads, block_size] (fp32), then the
//   values' alike. Each (position, kv head) vector x is stored as x / scale with scale = its
//   largest magnitude / 448 (e4m3's largest finite value), so every vector uses the full range.
struct PagedKv {
  void* cache = nullptr;
  int64_t block_elements = 0;
  int64_t layer_offset = 0;
  int32_t block_size = 0;
  bool fp8 = false;
};

// Bytes of one layer's part of a KV block per token per kv head, for fp8: the key and value
// (head_dim bytes each) and their two fp32 scales.
inline constexpr int64_t Fp8KvBytesPerHeadToken(int64_t head_dim) { return 2 * head_dim + 8; }

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
