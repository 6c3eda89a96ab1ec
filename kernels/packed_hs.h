// A symmetric D x D matrix (the Hs of MesaNet and of Gated KalmaNet) kept as its upper block
// triangle: the 4x4 blocks (I, J) with J >= I, block-row by block-row; block-row I is rows
// 4I..4I+3 over columns 4I..D-1, row-major. Every float4 group of four columns starting at a
// multiple of 4 is 16-byte aligned (D is a multiple of 4). About half the floats of the whole
// matrix: the GPU state pools keep Hs so, which halves its share of a decode step's state
// traffic (read and written every step). Plain C++ shared by kernels and host code.
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

}  // namespace ridge
