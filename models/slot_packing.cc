#include "models/slot_packing.h"

#include <algorithm>
#include <cassert>

#include "kernels/mesa_slot_layout.h"

namespace ridge {

SlotShape SlotShape::Of(const MesaNetConfig& config) {
  return {config.num_hidden_layers, config.num_heads, config.head_dim, config.conv_size};
}

int64_t SlotShape::state_layer_floats() const {
  return 2 * heads * head_dim * head_dim + 2 * (conv_size - 1) * heads * head_dim;
}

int64_t SlotShape::packed_layer_floats() const {
  return SlotLayerFloats(heads, head_dim, conv_size);
}

int64_t SlotShape::packed_slot_floats() const { return layers * packed_layer_floats(); }

namespace {

// Gs and the tails follow Hs contiguously in both layouts.
int64_t RestFloats(const SlotShape& s) {
  return s.state_layer_floats() - s.heads * s.head_dim * s.head_dim;
}

}  // namespace

void PackSlot(const SlotShape& s, std::span<const float> state, std::span<float> packed) {
  assert(static_cast<int64_t>(state.size()) == s.layers * s.state_layer_floats());
  assert(static_cast<int64_t>(packed.size()) == s.packed_slot_floats());
  const int64_t d = s.head_dim;
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    const float* from = state.data() + layer * s.state_layer_floats();
    float* to = packed.data() + layer * s.packed_layer_floats();
    for (int64_t head = 0; head < s.heads; ++head) {
      const float* hs = from + head * d * d;
      float* out = to + SlotHsOffset(d, head);
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = i / 4 * 4; j < d; ++j) out[PackedHsElement(d, i, j)] = hs[i * d + j];
      }
    }
    const float* rest = from + s.heads * d * d;
    std::copy(rest, rest + RestFloats(s), to + SlotGsOffset(s.heads, d, 0));
  }
}

void UnpackSlot(const SlotShape& s, std::span<const float> packed, std::span<float> state) {
  assert(static_cast<int64_t>(state.size()) == s.layers * s.state_layer_floats());
  assert(static_cast<int64_t>(packed.size()) == s.packed_slot_floats());
  const int64_t d = s.head_dim;
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    const float* from = packed.data() + layer * s.packed_layer_floats();
    float* to = state.data() + layer * s.state_layer_floats();
    for (int64_t head = 0; head < s.heads; ++head) {
      const float* in = from + SlotHsOffset(d, head);
      float* hs = to + head * d * d;
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j) hs[i * d + j] = in[PackedHsElement(d, i, j)];
      }
    }
    const float* rest = from + SlotGsOffset(s.heads, d, 0);
    std::copy(rest, rest + RestFloats(s), to + s.heads * d * d);
  }
}

}  // namespace ridge
