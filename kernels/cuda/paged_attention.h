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
  // The splits of each row: the grid's width. A row's keys are spread evenly over them in
  // whole tiles of 16 (the last splits of a short row may have none).
  int32_t max_splits = 1;
  // Scratch for max_splits > 1: [rows, q_heads, max_splits] floats twice, then
  // [rows, q_heads, max_splits, head_dim] floats.
  float* partials = nullptr;
  void* out_bf16 = nullptr;  // [rows, out_stride]: head h at columns [h*D, (h+1)*D)
  int64_t out_stride = 0;
  // The rows the grid covers: row_list[i] for i < row_list_size, or every row of the step when
  // row_list is null.
  const int32_t* row_list = nullptr;
  int32_t row_list_size = 0;
};

// Floats of scratch PagedAttentionArgs::partials needs.
int64_t PagedAttentionScratchFloats(int64_t rows, int64_t q_heads, int64_t head_dim,
                                    int64_t max_splits);

// What the choice of splits looks at: the rows a launch covers and the kernel that takes them.
struct AttentionSplitShape {
  int64_t rows = 0, max_keys = 0;  // max_keys: the most keys a row has
  int32_t q_heads = 0, kv_heads = 0, head_dim = 0;
  bool paged = true;  // full attention over KV blocks (else a sliding window's ring)
  int32_t block_size = 16;
  bool fp8 = false;
};

// PagedAttentionArgs::max_splits for `shape` on `sm_count` multiprocessors: the count whose
// blocks fill the blocks the GPU holds at once (the kernel's occupancy, asked of the runtime the
// first time and kept) in the fewest, fullest waves for the keys each takes, the partials'
// traffic and the merge counted; no split under 512 keys. A split count that leaves the last
// wave of blocks a quarter full made the kernel 5% slower on an H200 (tools/bench/RESULTS.md).
int32_t PickAttentionSplits(const AttentionSplitShape& shape, int32_t sm_count);

bool PagedAttentionSupports(int32_t q_heads, int32_t kv_heads, int32_t head_dim);

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream);

// Prompt rows of a full-attention layer on the tensor cores (FlashAttention style, mma.sync
// bf16): a block takes up to 16 consecutive rows of one sequence (tile_first_row[i], i <
// num_tiles; a tile never crosses sequences) for one kv head, a warp per query head of the
// group, and walks the sequence's keys up to the tile's last position in tiles of 64 from the
// KV blocks (args.paged; written by LaunchQkRope first), causally masked. Ignores the splits.
bool PrefillAttentionSupports(int32_t q_heads, int32_t kv_heads, int32_t head_dim);
cudaError_t LaunchPagedPrefillAttention(const PagedAttentionArgs& args,
                                        const int32_t* tile_first_row, int32_t num_tiles,
                                        cudaStream_t stream);

}  // namespace ridge::cuda
