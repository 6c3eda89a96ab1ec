// How close two sets of logits are: relative RMS of the difference and top-1 agreement per
// row; and reading the float32 logit files recorded from reference implementations.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <vector>

namespace ridge::testing {

struct Agreement {
  double relative_rms = 0;
  double top1 = 0;  // fraction of rows whose argmax agrees
};

inline Agreement Compare(std::span<const float> got, std::span<const float> want, int64_t width) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, norm = 0;
  int64_t same = 0;
  const int64_t rows = static_cast<int64_t>(want.size()) / width;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  for (int64_t r = 0; r < rows && (r + 1) * width <= static_cast<int64_t>(got.size()); ++r) {
    const auto g = got.begin() + r * width, w = want.begin() + r * width;
    same += std::max_element(g, g + width) - g == std::max_element(w, w + width) - w;
  }
  return {std::sqrt(diff / std::max(norm, 1e-30)), rows ? double(same) / rows : 1.0};
}

// A little-endian float32 file (the machines here are little-endian).
inline std::vector<float> ReadFloats(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

}  // namespace ridge::testing
