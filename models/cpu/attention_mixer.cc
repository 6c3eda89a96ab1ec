#include "models/cpu/attention_mixer.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "models/rope.h"

namespace ridge {

AttentionMixer::AttentionMixer(const AttentionSpec& spec, int64_t hidden_size,
                               AttentionLayerWeights weights, int64_t kv_offset)
    : spec_(spec),
      hidden_size_(hidden_size),
      w_(std::move(weights)),
      kv_offset_(kv_offset),
      inv_freq_(RopeInverseFrequencies(spec.rope, spec.head_dim)) {}

void AttentionMixer::Forward(const MixerBatch& batch, const float* normed, float* hidden) const {
  const int64_t rows = batch.rows, d = spec_.head_dim, hq = spec_.q_heads, hkv = spec_.kv_heads;
  const int64_t q_width = hq * d, kv_width = hkv * d, width = q_width + 2 * kv_width;
  const KvLayout& layout = *batch.kv_layout;
  const int64_t bs = layout.block_size, block_floats = layout.floats_per_block();
  float* layer_kv = batch.kv_storage + kv_offset_;  // keys [bs, kv_width], then values

  std::vector<float> proj(rows * width);
  MatMulWeights(normed, rows, w_.q_proj, proj.data(), width, false);
  MatMulWeights(normed, rows, w_.k_proj, proj.data() + q_width, width, false);
  MatMulWeights(normed, rows, w_.v_proj, proj.data() + q_width + kv_width, width, false);

  // Norms and rotation of q and k; k and v into their blocks.
  const float eps = static_cast<float>(spec_.qk_norm_eps);
  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const CpuSequence& seq = batch.sequences[ci];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
#pragma omp parallel for if (n > 16)
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> cos(d / 2), sin(d / 2);
      const int64_t position = seq.position + t;
      float* row = &proj[(batch.first_row[ci] + t) * width];
      RmsNormRows(row, w_.q_norm.data(), hq, static_cast<int>(d), eps, row);
      RmsNormRows(row + q_width, w_.k_norm.data(), hkv, static_cast<int>(d), eps, row + q_width);
      RopeAngles(spec_.rope, inv_freq_, position, cos.data(), sin.data());
      for (int64_t h = 0; h < hq + hkv; ++h) {
        ApplyRotaryHalf(row + h * d, static_cast<int>(d), cos.data(), sin.data());
      }
      float* block = layer_kv + seq.kv_blocks[position / bs] * block_floats;
      const int64_t slot_row = position % bs;
      std::copy_n(row + q_width, kv_width, block + slot_row * kv_width);
      std::copy_n(row + q_width + kv_width, kv_width, block + (bs + slot_row) * kv_width);
    }
  }

  // Every (token, query head) attends to the positions it may see.
  std::vector<float> out(rows * q_width);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = hq / hkv;
  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const CpuSequence& seq = batch.sequences[ci];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
#pragma omp parallel for schedule(dynamic, 1) if (n * hq > 8)
    for (int64_t task = 0; task < n * hq; ++task) {
      const int64_t t = task / hq, head = task % hq, kv_head = head / group;
      const int64_t position = seq.position + t;
      const int64_t first =
          spec_.window > 0 ? std::max<int64_t>(0, position - spec_.window + 1) : 0;
      const PagedKvHead kv{.storage = layer_kv,
                           .blocks = seq.kv_blocks,
                           .block_size = bs,
                           .block_floats = block_floats,
                           .keys_offset = kv_head * d,
                           .values_offset = bs * kv_width + kv_head * d,
                           .row_stride = kv_width};
      const int64_t r = batch.first_row[ci] + t;
      std::vector<float> scores(position - first + 1);
      PagedAttentionHead(&proj[r * width + head * d], static_cast<int>(d), scale, kv, first,
                         position, scores.data(), &out[r * q_width + head * d]);
    }
  }
  MatMulWeights(out.data(), rows, w_.o_proj, hidden, hidden_size_, true);
}

}  // namespace ridge
