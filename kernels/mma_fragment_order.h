// Fragment order of mma.sync m16n8k8 operands with 32-bit elements (.tf32), and of m16n8k16
// operands with 16-bit elements (.f16), the layouts in which the chunked prefill keeps its
// tensor-core operands in shared memory (kernels/cuda/tf32x3_mma.h): a warp then loads an A
// fragment with one 16-byte load a lane and a B fragment with one 8-byte load, in both. Plain
// C++, shared by the kernels and the host tests that check the layout.
//
// Fragments (PTX ISA, mma.m16n8k8 with .tf32; g = lane / 4, q = lane % 4):
//   A, 16 x 8:  a0 = A[g][q], a1 = A[g+8][q], a2 = A[g][q+4], a3 = A[g+8][q+4]
//   B,  8 x 8:  b0 = B[q][g], b1 = B[q+4][g]
//   C, 16 x 8:  c0 = C[g][2q], c1 = C[g][2q+1], c2 = C[g+8][2q], c3 = C[g+8][2q+1]
#pragma once

#include "kernels/host_device.h"

namespace ridge {

// Offset of element (r, c) of an A operand with `cols` columns (a multiple of 8; rows a
// multiple of 16) in fragment order: its 16 x 8 tiles row of tiles by row of tiles, each as 32
// lanes' (a0, a1, a2, a3).
RIDGE_HOST_DEVICE inline int APermOffset(int r, int c, int cols) {
  const int tile = (r >> 4) * (cols >> 3) + (c >> 3);
  const int lane = (r & 7) * 4 + (c & 3);
  return (tile * 32 + lane) * 4 + ((r >> 3) & 1) + 2 * ((c >> 2) & 1);
}

// Offset of element (k, n) of a B operand with `cols` columns n (a multiple of 8; rows k a
// multiple of 8) in fragment order: its 8 x 8 tiles, each as 32 lanes' (b0, b1).
RIDGE_HOST_DEVICE inline int BPermOffset(int k, int n, int cols) {
  const int tile = (k >> 3) * (cols >> 3) + (n >> 3);
  const int lane = (n & 7) * 4 + (k & 3);
  return (tile * 32 + lane) * 2 + ((k >> 2) & 1);
}

// Fragments (PTX ISA, mma.m16n8k16 with .f16; two elements a 32-bit register, the lower column
// or row in the low half):
//   A, 16 x 16: a0 = A[g][2q..2q+1], a1 = A[g+8][2q..2q+1], a2 = A[g][2q+8..], a3 = A[g+8][2q+8..]
//   B, 16 x 8:  b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g]

// Offset in halves of element (r, c) of an A operand with `cols` columns (a multiple of 16; rows
// a multiple of 16) in fragment order: its 16 x 16 tiles row of tiles by row of tiles, each as
// 32 lanes' (a0, a1, a2, a3). Each bit of r and of c moves the offset by its own amount, so the
// offset of (r, c) is the sum of those of (r, c & m) and (0, c & ~m) for any mask m.
RIDGE_HOST_DEVICE inline int AHalfOffset(int r, int c, int cols) {
  const int tile = (r >> 4) * (cols >> 4) + (c >> 4);
  const int lane = (r & 7) * 4 + ((c >> 1) & 3);
  const int reg = ((r >> 3) & 1) + 2 * ((c >> 3) & 1);
  return (tile * 32 + lane) * 8 + reg * 2 + (c & 1);
}

// Offset in halves of element (k, n) of a B operand with `cols` columns n (a multiple of 8; rows
// k a multiple of 16) in fragment order: its 16 x 8 tiles, each as 32 lanes' (b0, b1).
RIDGE_HOST_DEVICE inline int BHalfOffset(int k, int n, int cols) {
  const int tile = (k >> 4) * (cols >> 3) + (n >> 3);
  const int lane = (n & 7) * 4 + ((k >> 1) & 3);
  return (tile * 32 + lane) * 4 + ((k >> 3) & 1) * 2 + (k & 1);
}

// The same with the tiles of each pair 2m, 2m + 1 along n interleaved (cols / 8 even): lane l's
// fragments of both tiles in one 16-byte piece, words (4 (m * 32 + l)...+3) = (b0, b1) of tile
// 2m, then of tile 2m + 1, so that one load brings both. The 32-bit word of element (k, n), k
// even, which holds (k, n) and (k + 1, n).
RIDGE_HOST_DEVICE inline int BHalfPairedWord(int k, int n, int cols) {
  const int word = BHalfOffset(k, n, cols) >> 1;  // (tile * 32 + lane) * 2 + register
  const int tile = word >> 6, lane = (word >> 1) & 31;
  return ((tile >> 1) * 32 + lane) * 4 + (tile & 1) * 2 + (word & 1);
}

struct OperandElement {
  int k, n;
};

// The first element (k, n) of 32-bit word `word` of an f16 B operand with `cols` columns in
// fragment order; the word holds (k, n) and (k + 1, n). The inverse of BHalfOffset / 2.
RIDGE_HOST_DEVICE inline OperandElement BHalfWordElement(int word, int cols) {
  const int tile = word >> 6, lane = (word >> 1) & 31, reg = word & 1;
  return {16 * (tile / (cols >> 3)) + 2 * (lane & 3) + 8 * reg,
          8 * (tile % (cols >> 3)) + (lane >> 2)};
}

}  // namespace ridge
