// Small MesaNet models and token ids shared by the CUDA backend's tests.
#pragma once

#include <cstdint>
#include <vector>

#include "models/mesanet_config.h"

namespace ridge::testing {

// Deterministic token ids in [0, vocab).
inline std::vector<int32_t> Ids(int64_t n, int64_t seed, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int64_t t = 0; t < n; ++t)
    ids[t] = static_cast<int32_t>((t * 7919 + seed * 104729 + 13) % vocab);
  return ids;
}

// Two layers of hidden 256, enough heads of `head_dim` to make 512 key channels.
inline MesaNetConfig SmallConfig(int64_t head_dim, bool output_gate) {
  MesaNetConfig c;
  c.hidden_size = 256;
  c.num_heads = 256 / head_dim * 2;
  c.head_dim = head_dim;
  c.num_hidden_layers = 2;
  c.conv_size = 4;
  c.intermediate_size = 512;
  c.use_output_gate = output_gate;
  c.vocab_size = 384;
  return c;
}

}  // namespace ridge::testing
