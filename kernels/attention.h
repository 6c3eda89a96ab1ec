// Softmax attention of one query head over keys and values kept in fixed-size blocks of token
// positions (a paged KV cache), and rotary position embeddings, on the CPU.
#pragma once

#include <cstdint>
#include <span>

namespace ridge {

// Where a sequence's keys and values of one layer and one kv head lie: position p is row
// p % block_size of block blocks[p / block_size]; a block's keys start `keys_offset` floats into
// it and its values `values_offset`, rows `row_stride` floats apart.
struct PagedKvHead {
  const float* storage = nullptr;
  std::span<const int32_t> blocks;
  int64_t block_size = 0;
  int64_t block_floats = 0;  // floats from one block to the next in storage
  int64_t keys_offset = 0, values_offset = 0, row_stride = 0;

  const float* key(int64_t position) const { return row(position) + keys_offset; }
  const float* value(int64_t position) const { return row(position) + values_offset; }

 private:
  const float* row(int64_t position) const {
    return storage + blocks[position / block_size] * block_floats +
           (position % block_size) * row_stride;
  }
};

// out[0:d] = softmax(q . k_p * scale for p in [first, last]) weighted sum of v_p.
// scores: last - first + 1 floats of scratch.
void PagedAttentionHead(const float* q, int d, float scale, const PagedKvHead& kv, int64_t first,
                        int64_t last, float* scores, float* out);

// Rotary embedding in the rotate-half convention: x[i] and x[i + d/2] turn by the angle whose
// cosine and sine are cos[i] and sin[i], i < d/2.
void ApplyRotaryHalf(float* x, int d, const float* cos, const float* sin);

}  // namespace ridge
