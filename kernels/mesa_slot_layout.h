// The GPU state pool's layout of one layer of a sequence's MesaNet state. It differs from
// MesaState's (models/mesanet_state.h) in one way: Hs is symmetric, so only its upper block
// triangle is kept, which cuts the decode kernel's Hs traffic (read and write every step) and
// the slot's size by a quarter. Plain C++ shared by the kernels and the host code that converts
// between the two layouts (models/cuda/slot_packing.h).
//
// One layer: Hs of every head [H, PackedHsFloats(D)], Gs [H, D, D], q tail [W-1, H*D], k tail
// [W-1, H*D]; packed Hs as kernels/packed_hs.h says.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/packed_hs.h"

namespace ridge {

// Offsets within one layer of a slot.
RIDGE_HOST_DEVICE constexpr int64_t SlotHsOffset(int64_t d, int64_t head) {
  return head * PackedHsFloats(d);
}
RIDGE_HOST_DEVICE constexpr int64_t SlotGsOffset(int64_t heads, int64_t d, int64_t head) {
  return heads * PackedHsFloats(d) + head * d * d;
}
RIDGE_HOST_DEVICE constexpr int64_t SlotTailsOffset(int64_t heads, int64_t d) {
  return heads * (PackedHsFloats(d) + d * d);
}
RIDGE_HOST_DEVICE constexpr int64_t SlotLayerFloats(int64_t heads, int64_t d, int64_t conv) {
  return SlotTailsOffset(heads, d) + 2 * (conv - 1) * heads * d;
}

}  // namespace ridge
