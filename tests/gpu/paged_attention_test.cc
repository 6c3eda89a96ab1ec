// The paged attention kernels (kernels/cuda/paged_attention.h) against a float64 reference of
// causal GQA softmax attention over the same bf16 keys and values: decode rows of sequences of
// different lengths (crossing blocks and splits), with the tile kernels (blocks of 16 and 32)
// and the generic one (blocks of 8), one split or many; and prompt rows on the tensor cores.
#include "kernels/cuda/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "tests/gpu/device_array.h"

namespace ridge::cuda {
namespace {

struct Shape {
  int q_heads, kv_heads, head_dim, block_size;
};

// The step's sequences (one query row each for decode, every row for a prompt), their KV
// blocks scattered over a pool, and the float64 reference output.
struct AttentionCase {
  Shape shape;
  bool fp8 = false;                 // e4m3 blocks with per-(position, kv head) scales
  std::vector<int> lengths;         // keys of each sequence (its row is at position length - 1)
  bool prompt = false;              // every position of each sequence is a row
  std::vector<uint8_t> cache = {};  // the blocks' bytes
  std::vector<float> proj = {};
  std::vector<int32_t> table = {};
  int64_t row_sequence = 0, row_begin = 0, row_count = 0, start_position = 0, table_begin = 0,
          block_tables = 0, tiles = 0;
  int rows = 0, num_tiles = 0;
  std::vector<double> expected = {};  // [rows, q_heads * head_dim]
};

// Elements of a block (bytes for fp8, whose blocks hold the scales too).
int64_t BlockElements(const Shape& s, bool fp8) {
  return fp8 ? int64_t{s.kv_heads} * s.block_size * Fp8KvBytesPerHeadToken(s.head_dim)
             : 2LL * s.kv_heads * s.block_size * s.head_dim;
}

// e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN, there is no infinity.
double Fp8E4m3ToDouble(uint8_t bits) {
  const int exponent = (bits >> 3) & 15, mantissa = bits & 7;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, -6)
                                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return bits & 0x80 ? -magnitude : magnitude;
}

AttentionCase MakeCase(const Shape& shape, std::vector<int> lengths, bool prompt, uint32_t seed,
                       bool fp8 = false) {
  AttentionCase c{.shape = shape, .fp8 = fp8, .lengths = std::move(lengths), .prompt = prompt};
  const int d = shape.head_dim, bs = shape.block_size, group = shape.q_heads / shape.kv_heads;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<int64_t> blocks_of;
  int64_t total_blocks = 0;
  for (int length : c.lengths) {
    blocks_of.push_back((length + bs - 1) / bs);
    total_blocks += blocks_of.back();
  }
  total_blocks += 3;  // blocks nobody owns, full of other data
  const int64_t block_elements = BlockElements(shape, fp8);
  const int64_t kv_elements = int64_t{shape.kv_heads} * bs * d;  // of K (or V) in a block
  c.cache.resize(total_blocks * block_elements * (fp8 ? 1 : 2));
  if (fp8) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    for (int64_t b = 0; b < total_blocks; ++b) {
      uint8_t* block = &c.cache[b * block_elements];
      for (int64_t i = 0; i < 2 * kv_elements; ++i) {
        do block[i] = static_cast<uint8_t>(byte(rng));
        while ((block[i] & 0x7f) == 0x7f);  // not NaN
      }
      float* scales = reinterpret_cast<float*>(block + 2 * kv_elements);
      for (int64_t i = 0; i < 2 * kv_elements / d; ++i) scales[i] = scale(rng);
    }
  } else {
    for (size_t i = 0; i < c.cache.size(); i += 2) {
      const uint16_t bits = FloatToBf16(normal(rng));
      std::memcpy(&c.cache[i], &bits, 2);
    }
  }
  std::vector<int32_t> order(total_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);

  std::vector<int32_t> row_sequence, row_begin, row_count, start_position, table_begin, blocks,
      tiles;
  int64_t next_block = 0;
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    const int length = c.lengths[s];
    const int first_row = prompt ? 0 : length - 1;
    row_begin.push_back(static_cast<int32_t>(row_sequence.size()));
    row_count.push_back(length - first_row);
    start_position.push_back(first_row);
    table_begin.push_back(static_cast<int32_t>(blocks.size()));
    for (int64_t b = 0; b < blocks_of[s]; ++b) blocks.push_back(order[next_block++]);
    for (int r = first_row; r < length; r += 16) {
      tiles.push_back(static_cast<int32_t>(row_sequence.size() + (r - first_row)));
    }
    for (int r = first_row; r < length; ++r) row_sequence.push_back(static_cast<int32_t>(s));
  }
  c.rows = static_cast<int>(row_sequence.size());
  c.num_tiles = static_cast<int>(tiles.size());
  const auto take = [&](const std::vector<int32_t>& v) {
    const int64_t at = static_cast<int64_t>(c.table.size());
    c.table.insert(c.table.end(), v.begin(), v.end());
    return at;
  };
  c.row_sequence = take(row_sequence);
  c.row_begin = take(row_begin);
  c.row_count = take(row_count);
  c.start_position = take(start_position);
  c.table_begin = take(table_begin);
  c.block_tables = take(blocks);
  c.tiles = take(tiles);

  const int64_t width = int64_t{shape.q_heads + 2 * shape.kv_heads} * d;
  c.proj.resize(c.rows * width);
  for (float& x : c.proj) x = normal(rng);

  // The reference: row r of sequence s at position p attends to keys [0, p].
  const auto element = [&](int s, int position, int kv_head, int dim, bool value) {
    const int32_t block = blocks[table_begin[s] + position / bs];
    const int64_t vector = int64_t{kv_head} * bs + position % bs;
    const int64_t at = block * block_elements + (value ? kv_elements : 0) + vector * d + dim;
    if (fp8) {
      float scale;
      std::memcpy(&scale,
                  &c.cache[block * block_elements + 2 * kv_elements +
                           ((value ? kv_elements / d : 0) + vector) * 4],
                  4);
      return Fp8E4m3ToDouble(c.cache[at]) * scale;
    }
    uint16_t bits;
    std::memcpy(&bits, &c.cache[2 * at], 2);
    return static_cast<double>(Bf16ToFloat(bits));
  };
  c.expected.assign(int64_t{c.rows} * shape.q_heads * d, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int r = 0; r < c.rows; ++r) {
    const int s = row_sequence[r];
    const int position = start_position[s] + (r - row_begin[s]);
    for (int h = 0; h < shape.q_heads; ++h) {
      const int kv_head = h / group;
      std::vector<double> scores(position + 1);
      for (int p = 0; p <= position; ++p) {
        double dot = 0.0;
        for (int e = 0; e < d; ++e) {
          dot += c.proj[r * width + h * d + e] * element(s, p, kv_head, e, false);
        }
        scores[p] = dot * scale;
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      double sum = 0.0;
      for (double& x : scores) sum += (x = std::exp(x - top));
      for (int e = 0; e < d; ++e) {
        double out = 0.0;
        for (int p = 0; p <= position; ++p) out += scores[p] * element(s, p, kv_head, e, true);
        c.expected[(int64_t{r} * shape.q_heads + h) * d + e] = out / sum;
      }
    }
  }
  return c;
}

// Runs the case's decode (or prompt) kernel with keys split `split_keys` at a time (0: one
// split) and returns the largest difference from the reference, in units of the reference's
// largest magnitude.
double RunCase(const AttentionCase& c, int split_keys) {
  const Shape& shape = c.shape;
  DeviceArray<uint8_t> cache(c.cache);
  DeviceArray<float> proj(c.proj);
  DeviceArray<int32_t> table(c.table);
  DeviceArray<uint16_t> out(
      std::vector<uint16_t>(int64_t{c.rows} * shape.q_heads * shape.head_dim));
  PagedAttentionArgs a{};
  a.step.rows = c.rows;
  a.step.row_sequence = table.get() + c.row_sequence;
  a.step.row_begin = table.get() + c.row_begin;
  a.step.row_count = table.get() + c.row_count;
  a.step.start_position = table.get() + c.start_position;
  a.step.table_begin = table.get() + c.table_begin;
  a.step.block_tables = table.get() + c.block_tables;
  a.q_heads = shape.q_heads;
  a.kv_heads = shape.kv_heads;
  a.head_dim = shape.head_dim;
  a.proj = proj.get();
  a.proj_stride = int64_t{shape.q_heads + 2 * shape.kv_heads} * shape.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  a.paged = {cache.get(), BlockElements(shape, c.fp8), 0, shape.block_size, c.fp8};
  a.out_bf16 = out.get();
  a.out_stride = int64_t{shape.q_heads} * shape.head_dim;
  const int max_keys = *std::max_element(c.lengths.begin(), c.lengths.end());
  // Each row's keys spread over the splits: the longest row's in splits of about split_keys.
  a.max_splits = split_keys > 0 ? (max_keys + split_keys - 1) / split_keys : 1;
  DeviceArray<float> partials(std::vector<float>(std::max<int64_t>(
      1, PagedAttentionScratchFloats(c.rows, shape.q_heads, shape.head_dim, a.max_splits))));
  a.partials = partials.get();
  cudaError_t launched;
  if (c.prompt) {
    launched = LaunchPagedPrefillAttention(a, table.get() + c.tiles, c.num_tiles, nullptr);
  } else {
    launched = LaunchPagedAttention(a, nullptr);
  }
  EXPECT_EQ(launched, cudaSuccess) << cudaGetErrorString(launched);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> got = out.Download();
  double largest = 0.0, worst = 0.0;
  for (double x : c.expected) largest = std::max(largest, std::abs(x));
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(Bf16ToFloat(got[i]) - c.expected[i]);
    worst = std::max(worst, std::isfinite(diff) ? diff : 1e30);
  }
  return worst / largest;
}

std::string Name(const Shape& s) {
  char name[64];
  std::snprintf(name, sizeof(name), "q%dkv%dd%dbs%d", s.q_heads, s.kv_heads, s.head_dim,
                s.block_size);
  return name;
}

class PagedAttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(PagedAttentionTest, DecodeRowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  // Lengths inside a block, at and across block boundaries, and across several splits.
  const AttentionCase c = MakeCase(GetParam(), {1, 15, 16, 17, 33, 700, 1391}, false, 7);
  for (const int split_keys : {0, 64, 256}) {
    // bf16 output: a relative rounding of 2^-8 of each element.
    EXPECT_LT(RunCase(c, split_keys), 8e-3)
        << Name(GetParam()) << ", splits of " << split_keys << " keys";
  }
}

TEST_P(PagedAttentionTest, Fp8DecodeRowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  if (GetParam().block_size % 16 != 0) GTEST_SKIP() << "fp8 blocks hold a multiple of 16 tokens";
  const AttentionCase c = MakeCase(GetParam(), {1, 15, 16, 17, 33, 700, 1391}, false, 9, true);
  for (const int split_keys : {0, 64, 256}) {
    // The reference reads the same fp8 values: only the bf16 output rounds.
    EXPECT_LT(RunCase(c, split_keys), 8e-3)
        << Name(GetParam()) << " fp8, splits of " << split_keys << " keys";
  }
}

TEST_P(PagedAttentionTest, Fp8PromptRowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  if (GetParam().block_size % 16 != 0) GTEST_SKIP() << "fp8 blocks hold a multiple of 16 tokens";
  const AttentionCase c = MakeCase(GetParam(), {1, 17, 100, 300}, true, 13, true);
  EXPECT_LT(RunCase(c, 0), 2e-2) << Name(GetParam()) << " fp8";
}

TEST_P(PagedAttentionTest, PromptRowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  if (!PrefillAttentionSupports(GetParam().q_heads, GetParam().kv_heads, GetParam().head_dim)) {
    GTEST_SKIP() << "the tensor-core prompt kernel does not take " << Name(GetParam());
  }
  const AttentionCase c = MakeCase(GetParam(), {1, 17, 100, 300}, true, 11);
  // Probabilities round to bf16 before the products on the tensor cores.
  EXPECT_LT(RunCase(c, 0), 2e-2) << Name(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(Shape{32, 8, 128, 16}, Shape{8, 8, 128, 16},
                                           Shape{16, 8, 64, 16}, Shape{16, 2, 64, 32},
                                           Shape{8, 1, 128, 32}, Shape{8, 2, 128, 8}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return Name(info.param);
                         });

}  // namespace
}  // namespace ridge::cuda
