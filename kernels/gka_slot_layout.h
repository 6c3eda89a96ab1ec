// The GPU state pool's layout of one Gated KalmaNet layer of a sequence's state. It differs from
// the CPU's (models/model_spec.h RecurrentStateFloats: Hs [Hx, D, D], Ss [Hx, D, D], the
// convolution's tail) in one way: Hs is symmetric, so only its upper block triangle is kept
// (kernels/packed_hs.h), which cuts a decode step's state traffic by about a quarter and the slot
// by as much. Plain C++ shared by the kernels and the host code.
//
// One layer: Hs of every expanded head [Hx, PackedHsFloats(D)], Ss [Hx, D, D] (row = key
// index), then the convolution's tail [W-1, (Hq+Hk+Hv)*D].
#pragma once

#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/packed_hs.h"

namespace ridge {

RIDGE_HOST_DEVICE constexpr int64_t GkaSlotHsOffset(int64_t d, int64_t head) {
  return head * PackedHsFloats(d);
}
RIDGE_HOST_DEVICE constexpr int64_t GkaSlotSsOffset(int64_t heads, int64_t d, int64_t head) {
  return heads * PackedHsFloats(d) + head * d * d;
}
RIDGE_HOST_DEVICE constexpr int64_t GkaSlotTailOffset(int64_t heads, int64_t d) {
  return heads * (PackedHsFloats(d) + d * d);
}
RIDGE_HOST_DEVICE constexpr int64_t GkaSlotLayerFloats(int64_t heads, int64_t d,
                                                       int64_t tail_floats) {
  return GkaSlotTailOffset(heads, d) + tail_floats;
}

}  // namespace ridge
