// The GPU state pool's layout of one layer of a sequence's MesaNet state. It differs from
// MesaState's (models/mesanet_state.h) in one way: Hs is symmetric, so only its upper block
// triangle is kept, which cuts the decode kernel's Hs traffic (read and write every step) and
// the slot's size by a quarter. Plain C++ shared by the kernels and the host code that converts
// between the two layouts (models/cuda/slot_packing.h).
//
// One layer: Hs of every head [H, PackedHsFloats(D)], Gs [H, D, D], q tail [W-1, H*D], k tail
// [W-1, H*D]. Packed Hs: the 4x4 blocks (I, J) with J >= I, block-row by block-row; block-row I
// is rows 4I..4I+3 over columns 4I..D-1, row-major. Every float4 group of four columns starting
// at a multiple of 4 is 16-byte aligned (D is a multiple of 4).
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace ridge {

// Floats of one head's packed Hs: sum over block-rows I of 4 (D - 4I) = D^2 / 2 + 2 D.
RIDGE_HOST_DEVICE constexpr int64_t PackedHsFloats(int64_t d) { return d * d / 2 + 2 * d; }

// Offset in a packed Hs of element (row, 4 * group), for column groups group >= row / 4 (the
// upper block triangle; element (i, j) below it is element (j, i)). Rows of a block-row lie
// D - 4 * (row / 4) floats apart. Int is int in kernels (less register and ALU cost than 64-bit
// offsets; a head's packed Hs is far below 2^31 floats), int64_t on the host.
template <typename Int>
RIDGE_HOST_DEVICE constexpr Int PackedHsOffset(Int d, Int row, Int group) {
  const Int block = row / 4;
  return 4 * d * block - 8 * block * (block - 1) + (row % 4) * (d - 4 * block) +
         4 * (group - block);
}

// Offset in a packed Hs of any element (i, j).
template <typename Int>
RIDGE_HOST_DEVICE constexpr Int PackedHsElement(Int d, Int i, Int j) {
  return j / 4 >= i / 4 ? PackedHsOffset(d, i, j / 4) + j % 4 : PackedHsOffset(d, j, i / 4) + i % 4;
}

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
