// The GPU pool's packed slot layout (kernels/mesa_slot_layout.h) and its conversion to and from
// MesaState's, checked without a GPU.
#include "models/slot_packing.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/mesa_slot_layout.h"

namespace ridge {
namespace {

class PackedHsTest : public ::testing::TestWithParam<int> {};

// Every element of the upper block triangle gets its own offset, and together they fill
// [0, PackedHsFloats) exactly; float4 groups start 16-byte aligned.
TEST_P(PackedHsTest, OffsetsAreABijectionOntoThePackedRange) {
  const int d = GetParam();
  std::vector<int> hits(PackedHsFloats(d), 0);
  for (int i = 0; i < d; ++i) {
    for (int group = i / 4; group < d / 4; ++group) {
      const int64_t at = PackedHsOffset(d, i, group);
      ASSERT_EQ(at % 4, 0) << "row " << i << " group " << group;
      for (int c = 0; c < 4; ++c) {
        ASSERT_GE(at + c, 0);
        ASSERT_LT(at + c, PackedHsFloats(d));
        ++hits[at + c];
      }
    }
  }
  for (size_t k = 0; k < hits.size(); ++k) ASSERT_EQ(hits[k], 1) << "offset " << k;
  // Off the diagonal blocks (i, j) and (j, i) share a float; inside them each has its own.
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) {
      if (i / 4 == j / 4) {
        ASSERT_EQ(PackedHsElement(d, i, j) == PackedHsElement(d, j, i), i == j);
      } else {
        ASSERT_EQ(PackedHsElement(d, i, j), PackedHsElement(d, j, i));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, PackedHsTest, ::testing::Values(4, 8, 64, 128));

std::vector<float> Counting(int64_t n, float start) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(SlotPackingTest, RoundTripKeepsSymmetricHsGsAndTails) {
  const SlotShape shape{3, 2, 8, 4};
  const int64_t d = shape.head_dim, hs_floats = shape.heads * d * d;
  std::vector<float> state = Counting(shape.layers * shape.state_layer_floats(), 1.0f);
  for (int64_t layer = 0; layer < shape.layers; ++layer) {  // make every Hs symmetric
    for (int64_t head = 0; head < shape.heads; ++head) {
      float* hs = state.data() + layer * shape.state_layer_floats() + head * d * d;
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < i; ++j) hs[i * d + j] = hs[j * d + i];
      }
    }
  }
  std::vector<float> packed(shape.layers * shape.packed_layer_floats(), -1.0f);
  PackSlot(shape, state, packed);
  EXPECT_EQ(shape.packed_layer_floats(),
            shape.state_layer_floats() - shape.heads * (d * d / 2 - 2 * d));
  // Gs and tails sit after the packed Hs, unchanged.
  for (int64_t layer = 0; layer < shape.layers; ++layer) {
    const float* rest = state.data() + layer * shape.state_layer_floats() + hs_floats;
    const float* got =
        packed.data() + layer * shape.packed_layer_floats() + SlotGsOffset(shape.heads, d, 0);
    for (int64_t k = 0; k < shape.state_layer_floats() - hs_floats; ++k) {
      ASSERT_EQ(got[k], rest[k]) << "layer " << layer << " float " << k;
    }
  }
  std::vector<float> back(state.size(), 0.0f);
  UnpackSlot(shape, packed, back);
  EXPECT_EQ(back, state);
}

TEST(SlotPackingTest, AnAsymmetricHsComesBackMirroredFromItsUpperBlockTriangle) {
  const SlotShape shape{1, 1, 8, 2};
  const int64_t d = shape.head_dim;
  const std::vector<float> state = Counting(shape.state_layer_floats(), 0.0f);
  std::vector<float> packed(shape.packed_layer_floats());
  PackSlot(shape, state, packed);
  std::vector<float> back(state.size());
  UnpackSlot(shape, packed, back);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const bool upper = j / 4 >= i / 4;
      EXPECT_EQ(back[i * d + j], upper ? state[i * d + j] : state[j * d + i]) << i << "," << j;
    }
  }
  // Inside a diagonal 4x4 block both halves are kept as they were.
  EXPECT_EQ(back[1 * d + 0], state[1 * d + 0]);
  EXPECT_NE(back[1 * d + 0], state[0 * d + 1]);
}

}  // namespace
}  // namespace ridge
