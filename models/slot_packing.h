// Conversion of a sequence's state between MesaState's layout (models/mesanet_state.h: full
// Hs and Gs per head) and the GPU state pool's (kernels/mesa_slot_layout.h: Hs packed to its
// upper block triangle). Plain C++, so the layout is tested without a GPU.
#pragma once

#include <cstdint>
#include <span>

#include "models/mesanet_config.h"

namespace ridge {

struct SlotShape {
  int64_t layers, heads, head_dim, conv_size;
  static SlotShape Of(const MesaNetConfig& config);
  int64_t state_layer_floats() const;   // one layer of MesaState
  int64_t packed_layer_floats() const;  // one layer of a pool slot
  int64_t packed_slot_floats() const;   // a whole pool slot: every layer
};

// Sizes must be layers * state_layer_floats() and layers * packed_layer_floats() (checked by
// assertion: callers own both buffers). Packing keeps Hs's upper block triangle, so an Hs that
// is not exactly symmetric comes back mirrored from it.
void PackSlot(const SlotShape& shape, std::span<const float> state, std::span<float> packed);
void UnpackSlot(const SlotShape& shape, std::span<const float> packed, std::span<float> state);

}  // namespace ridge
