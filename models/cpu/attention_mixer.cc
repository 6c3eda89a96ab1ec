#include "models/cpu/attention_mixer.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "models/rope.h"

namespace ridge {

AttentionMixer::AttentionMixer(const AttentionSpec& spec, int64_t hidden_size,
                               AttentionLayerWeights weights, int64_t memory_offset)
    : spec_(spec),
      hidden_size_(hidden_size),
      w_(std::move(weights)),
      memory_offset_(memory_offset),
      inv_freq_(RopeInverseFrequencies(spec.rope, spec.head_dim)),
      q_width_(spec.q_heads * spec.head_dim),
      kv_width_(spec.kv_heads * spec.head_dim),
      width_(q_width_ + 2 * kv_width_) {}

void AttentionMixer::Forward(const MixerBatch& batch, const float* normed, float* hidden) const {
  std::vector<float> proj = Project(batch, normed);
  std::vector<float> out(batch.rows * q_width_);
  if (spec_.window > 0) {
    AttendWindow(batch, proj, out.data());
  } else {
    AttendPaged(batch, proj, out.data());
  }
  MatMulWeights(out.data(), batch.rows, w_.o_proj, hidden, hidden_size_, true);
}

std::vector<float> AttentionMixer::Project(const MixerBatch& batch, const float* normed) const {
  const int64_t d = spec_.head_dim;
  std::vector<float> proj(batch.rows * width_);
  MatMulWeights(normed, batch.rows, w_.q_proj, proj.data(), width_, false);
  MatMulWeights(normed, batch.rows, w_.k_proj, proj.data() + q_width_, width_, false);
  MatMulWeights(normed, batch.rows, w_.v_proj, proj.data() + q_width_ + kv_width_, width_, false);
  const float eps = static_cast<float>(spec_.qk_norm_eps);
  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const CpuSequence& seq = batch.sequences[ci];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
#pragma omp parallel for if (n > 16)
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> cos(d / 2), sin(d / 2);
      float* row = &proj[(batch.first_row[ci] + t) * width_];
      RmsNormRows(row, w_.q_norm.data(), spec_.q_heads, static_cast<int>(d), eps, row);
      RmsNormRows(row + q_width_, w_.k_norm.data(), spec_.kv_heads, static_cast<int>(d), eps,
                  row + q_width_);
      RopeAngles(spec_.rope, inv_freq_, seq.position + t, cos.data(), sin.data());
      for (int64_t h = 0; h < spec_.q_heads + spec_.kv_heads; ++h) {
        ApplyRotaryHalf(row + h * d, static_cast<int>(d), cos.data(), sin.data());
      }
    }
  }
  return proj;
}

namespace {

// The queries of one sequence's step over keys and values at positions [first_position, ...),
// row p - first_position of `kv` (PagedKvHead, with whatever blocks hold them).
void AttendRows(const AttentionSpec& spec, const float* proj, int64_t width, int64_t n,
                int64_t position, PagedKvHead kv, int64_t first_position, float* out,
                int64_t out_width) {
  const int64_t d = spec.head_dim, hq = spec.q_heads, group = hq / spec.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t keys_offset = kv.keys_offset, values_offset = kv.values_offset;
#pragma omp parallel for schedule(dynamic, 1) if (n * hq > 8)
  for (int64_t task = 0; task < n * hq; ++task) {
    const int64_t t = task / hq, head = task % hq, kv_head = head / group;
    const int64_t query_position = position + t;
    const int64_t first =
        spec.window > 0 ? std::max<int64_t>(0, query_position - spec.window + 1) : 0;
    PagedKvHead head_kv = kv;
    head_kv.keys_offset = keys_offset + kv_head * d;
    head_kv.values_offset = values_offset + kv_head * d;
    std::vector<float> scores(query_position - first + 1);
    PagedAttentionHead(proj + t * width + head * d, static_cast<int>(d), scale, head_kv,
                       first - first_position, query_position - first_position, scores.data(),
                       out + t * out_width + head * d);
  }
}

}  // namespace

void AttentionMixer::AttendPaged(const MixerBatch& batch, std::vector<float>& proj,
                                 float* out) const {
  const KvLayout& layout = *batch.kv_layout;
  const int64_t bs = layout.block_size, block_floats = layout.floats_per_block();
  float* layer_kv = batch.kv_storage + memory_offset_;  // keys [bs, kv_width], then values
  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const CpuSequence& seq = batch.sequences[ci];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    const float* rows = &proj[batch.first_row[ci] * width_];
    for (int64_t t = 0; t < n; ++t) {
      const int64_t position = seq.position + t;
      float* block = layer_kv + seq.kv_blocks[position / bs] * block_floats;
      const int64_t slot_row = position % bs;
      std::copy_n(rows + t * width_ + q_width_, kv_width_, block + slot_row * kv_width_);
      std::copy_n(rows + t * width_ + q_width_ + kv_width_, kv_width_,
                  block + (bs + slot_row) * kv_width_);
    }
    const PagedKvHead kv{.storage = layer_kv,
                         .blocks = seq.kv_blocks,
                         .block_size = bs,
                         .block_floats = block_floats,
                         .keys_offset = 0,
                         .values_offset = bs * kv_width_,
                         .row_stride = kv_width_};
    AttendRows(spec_, rows, width_, n, seq.position, kv, 0, out + batch.first_row[ci] * q_width_,
               q_width_);
  }
}

void AttentionMixer::AttendWindow(const MixerBatch& batch, std::vector<float>& proj,
                                  float* out) const {
  const int64_t window = spec_.window;
  const int32_t only_block = 0;
  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const CpuSequence& seq = batch.sequences[ci];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    const float* rows = &proj[batch.first_row[ci] * width_];
    float* ring_keys = seq.state + memory_offset_;
    float* ring_values = ring_keys + window * kv_width_;
    if (n == 1) {
      // A decode token: its row goes into the ring first (over the position that just left the
      // window), then it attends to the ring in place, position p at row p % window.
      const int64_t row = seq.position % window;
      std::copy_n(rows + q_width_, kv_width_, ring_keys + row * kv_width_);
      std::copy_n(rows + q_width_ + kv_width_, kv_width_, ring_values + row * kv_width_);
      const std::vector<int32_t> laps(seq.position / window + 1, 0);  // every lap: the ring
      const PagedKvHead ring{.storage = ring_keys,
                             .blocks = laps,
                             .block_size = window,
                             .block_floats = 0,
                             .keys_offset = 0,
                             .values_offset = window * kv_width_,
                             .row_stride = kv_width_};
      AttendRows(spec_, rows, width_, 1, seq.position, ring, 0,
                 out + batch.first_row[ci] * q_width_, q_width_);
      continue;
    }
    // The window of the step's first query, then the step's own positions: keys, then values.
    const int64_t first = std::max<int64_t>(0, seq.position - window + 1);
    const int64_t span = seq.position + n - first;
    std::vector<float> kv(2 * span * kv_width_);
    for (int64_t p = first; p < seq.position + n; ++p) {
      const bool in_ring = p < seq.position;
      const float* key = in_ring ? ring_keys + (p % window) * kv_width_
                                 : rows + (p - seq.position) * width_ + q_width_;
      const float* value = in_ring ? ring_values + (p % window) * kv_width_ : key + kv_width_;
      std::copy_n(key, kv_width_, &kv[(p - first) * kv_width_]);
      std::copy_n(value, kv_width_, &kv[(span + p - first) * kv_width_]);
    }
    const PagedKvHead window_kv{.storage = kv.data(),
                                .blocks = {&only_block, 1},
                                .block_size = span,
                                .block_floats = 0,
                                .keys_offset = 0,
                                .values_offset = span * kv_width_,
                                .row_stride = kv_width_};
    AttendRows(spec_, rows, width_, n, seq.position, window_kv, first,
               out + batch.first_row[ci] * q_width_, q_width_);
    // The ring keeps the last `window` positions.
    for (int64_t p = std::max(seq.position, seq.position + n - window); p < seq.position + n; ++p) {
      const float* row = rows + (p - seq.position) * width_;
      std::copy_n(row + q_width_, kv_width_, ring_keys + (p % window) * kv_width_);
      std::copy_n(row + q_width_ + kv_width_, kv_width_, ring_values + (p % window) * kv_width_);
    }
  }
}

}  // namespace ridge
