// A small random hybrid_qwen3 shape that tensor parallelism splits every way it can: GKA with
// GQA-expanded heads, full and sliding-window attention with fewer key/value heads than ranks,
// MLP widths and a vocabulary that do not divide (tensor_parallel_test,
// tensor_parallel_cpu_backend_test).
#pragma once

#include <cstdint>

#include "models/model_spec.h"

namespace ridge {

inline GkaSpec Gka(int64_t q, int64_t k, int64_t v, int64_t d) {
  GkaSpec g;
  g.q_heads = q;
  g.k_heads = k;
  g.v_heads = v;
  g.head_dim = d;
  return g;
}

inline AttentionSpec Attention(int64_t q, int64_t kv, int64_t d, int64_t window = 0) {
  AttentionSpec a;
  a.q_heads = q;
  a.kv_heads = kv;
  a.head_dim = d;
  a.window = window;
  a.rope.theta = 10000.0;
  return a;
}

// GKA (q 4 / k 2 / v 2 heads of 16), full attention (8 / 2), sliding window of 5 (4 / 1), GKA
// (2 / 2 / 4): with 4 ranks, k, v and key/value heads are replicated; MLP 90 and vocabulary 103
// do not divide by 4 (or 3).
inline ModelSpec SmallHybrid() {
  ModelSpec spec;
  spec.architecture = "hybrid_qwen3";
  spec.vocab_size = 103;
  spec.hidden_size = 64;
  spec.max_position_embeddings = 4096;
  spec.layers = {{Gka(4, 2, 2, 16), 90},
                 {Attention(8, 2, 16), 90},
                 {Attention(4, 1, 16, 5), 96},
                 {Gka(2, 2, 4, 16), 90}};
  return spec;
}

}  // namespace ridge
