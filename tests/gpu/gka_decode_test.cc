// The GKA decode kernel (kernels/cuda/gka_decode.h) against the CPU's GkaHeadStep
// (kernels/gka_step.h), which the hybrid goldens check against a float64 reference: head sizes
// 64 and 128, odd batch sizes, several expanded heads, slots out of order, tolerance 0 / 1e-3 /
// 1e-6, caps of 1 and 30 iterations, num_iter 0 (no solve), states that went through many tokens
// and a state of zeros; outputs, the states written back and the solver counters. Skips without
// a GPU.
#include "kernels/cuda/gka_decode.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/gka_step.h"
#include "tests/gpu/device_array.h"

namespace ridge::cuda {
namespace {

struct Case {
  int head_dim, sequences, heads, max_iterations;
  float tolerance;
  bool solve;
  int history;  // tokens already in the states (0: a state of zeros)
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream name;
  name << "d" << c.head_dim << "_b" << c.sequences << "_h" << c.heads << "_it" << c.max_iterations
       << "_tol" << (c.tolerance > 0 ? -std::lround(std::log10(c.tolerance)) : 0)
       << (c.solve ? "" : "_nosolve") << "_hist" << c.history;
  return name.str();
}

class GkaDecodeTest : public ::testing::TestWithParam<Case> {};

// A unit vector of `d` normal entries (the L2-normalised q and k).
std::vector<float> Unit(int d, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(d);
  double n2 = 0;
  for (float& x : v) {
    x = normal(rng);
    n2 += double(x) * x;
  }
  for (float& x : v) x = static_cast<float>(x / (std::sqrt(n2) + 1e-6));
  return v;
}

TEST_P(GkaDecodeTest, MatchesTheCpuStep) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const int d = c.head_dim, hx = c.heads, n = c.sequences;
  std::mt19937 rng(d * 1000 + n * 10 + hx);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const int64_t layer_floats = 2 * int64_t{hx} * d * d;
  const int64_t slot_floats = layer_floats + 64;  // the layer sits at offset 32 of its slot
  const int64_t layer_offset = 32;
  const int slots = n + 2;
  std::vector<float> pool(slots * slot_floats, 0.0f);
  std::vector<int32_t> slot(n);
  for (int s = 0; s < n; ++s) slot[s] = slots - 1 - s;  // out of order; slots 0 and 1 unused

  // Each (sequence, head) state after `history` tokens of the CPU step.
  auto gate = [&](float* beta, float* alpha, float* log_decay) {
    *beta = 1.0f / (1.0f + std::exp(-4.0f * (uniform(rng) - 0.3f))) + 1e-6f;
    *alpha = uniform(rng);
    *log_decay = -0.5f * uniform(rng);
  };
  std::vector<float> scratch(4 * d), out_cpu(d);
  for (int s = 0; s < n; ++s) {
    for (int h = 0; h < hx; ++h) {
      float* hs = &pool[slot[s] * slot_floats + layer_offset + int64_t{h} * d * d];
      float* ss = hs + int64_t{hx} * d * d;
      for (int t = 0; t < c.history; ++t) {
        const auto q = Unit(d, rng), k = Unit(d, rng), v = Unit(d, rng);
        float beta, alpha, log_decay;
        gate(&beta, &alpha, &log_decay);
        GkaHeadStep({q.data(), k.data(), v.data(), beta, alpha, log_decay, 0.02f, true}, d,
                    {0.0f, 30}, hs, ss, out_cpu.data(), scratch.data());
      }
    }
  }
  // The step both sides take.
  std::vector<float> q, k, v, beta(n * hx), alpha(n * hx), log_decay(n * hx);
  for (int p = 0; p < n * hx; ++p) {
    for (auto* vec : {&q, &k, &v}) {
      const auto u = Unit(d, rng);
      vec->insert(vec->end(), u.begin(), u.end());
    }
    gate(&beta[p], &alpha[p], &log_decay[p]);
  }
  std::vector<float> tolerance(n, c.tolerance);
  std::vector<int32_t> max_iterations(n, c.max_iterations);
  if (n > 1) tolerance[1] = 0.0f;  // sequences keep their own budgets

  DeviceArray<float> d_pool(pool), d_q(q), d_k(k), d_v(v), d_beta(beta), d_alpha(alpha),
      d_decay(log_decay), d_tol(tolerance), d_out(std::vector<float>(n * hx * d, 0.0f));
  DeviceArray<int32_t> d_max(max_iterations), d_slot(slot);
  DeviceArray<SolveCounters> d_counters(std::vector<SolveCounters>(n * hx, SolveCounters{}));
  GkaDecodeArgs args{.num_sequences = n,
                     .heads = hx,
                     .head_dim = d,
                     .q = d_q.get(),
                     .k = d_k.get(),
                     .v = d_v.get(),
                     .beta = d_beta.get(),
                     .alpha = d_alpha.get(),
                     .log_decay = d_decay.get(),
                     .tolerance = d_tol.get(),
                     .max_iterations = d_max.get(),
                     .slot = d_slot.get(),
                     .state_pool = d_pool.get(),
                     .slot_floats = slot_floats,
                     .layer_offset = layer_offset,
                     .ridge_strength = 0.02f,
                     .solve = c.solve,
                     .out = d_out.get(),
                     .counters = d_counters.get()};
  ASSERT_EQ(LaunchGkaDecode(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> gpu_pool = d_pool.Download(), gpu_out = d_out.Download();
  const std::vector<SolveCounters> counters = d_counters.Download();

  double out_diff = 0, out_norm = 0, state_diff = 0, state_norm = 0;
  for (int s = 0; s < n; ++s) {
    for (int h = 0; h < hx; ++h) {
      const int p = s * hx + h;
      const int64_t at = slot[s] * slot_floats + layer_offset + int64_t{h} * d * d;
      float* hs = &pool[at];
      float* ss = hs + int64_t{hx} * d * d;
      const auto result = GkaHeadStep(
          {&q[p * d], &k[p * d], &v[p * d], beta[p], alpha[p], log_decay[p], 0.02f, c.solve}, d,
          {tolerance[s], max_iterations[s]}, hs, ss, out_cpu.data(), scratch.data());
      for (int i = 0; i < d; ++i) {
        out_diff += std::pow(double(gpu_out[p * d + i]) - out_cpu[i], 2);
        out_norm += std::pow(double(out_cpu[i]), 2);
      }
      for (int64_t i = 0; i < int64_t{d} * d; ++i) {
        for (const int64_t offset : {at, at + int64_t{hx} * d * d}) {
          state_diff += std::pow(double(gpu_pool[offset + i]) - pool[offset + i], 2);
          state_norm += std::pow(double(pool[offset + i]), 2);
        }
      }
      if (!c.solve) {
        EXPECT_EQ(counters[p].solves, 0);
        continue;
      }
      ASSERT_TRUE(result.has_value());
      EXPECT_EQ(counters[p].solves, 1);
      // Float sums in another order can put a residual on the other side of the tolerance.
      EXPECT_NEAR(counters[p].total_iterations, result->iterations, tolerance[s] > 0 ? 1 : 0)
          << "sequence " << s << " head " << h;
      EXPECT_EQ(counters[p].capped != 0, result->capped) << "sequence " << s << " head " << h;
      EXPECT_NEAR(counters[p].sum_residual, result->relative_residual,
                  1e-3 + 0.05 * result->relative_residual);
    }
  }
  EXPECT_LT(std::sqrt(out_diff / std::max(out_norm, 1e-30)), 2e-4);
  EXPECT_LT(std::sqrt(state_diff / std::max(state_norm, 1e-30)), 1e-6);
  // Slots no sequence names are untouched.
  for (int s = 0; s < slots; ++s) {
    if (std::find(slot.begin(), slot.end(), s) != slot.end()) continue;
    for (int64_t i = 0; i < slot_floats; ++i) ASSERT_EQ(gpu_pool[s * slot_floats + i], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GkaDecodeTest,
    ::testing::Values(Case{128, 3, 4, 30, 0.0f, true, 12}, Case{128, 5, 2, 30, 1e-3f, true, 40},
                      Case{128, 1, 1, 30, 1e-6f, true, 3}, Case{64, 7, 3, 30, 0.0f, true, 20},
                      Case{64, 2, 4, 1, 0.0f, true, 5}, Case{64, 3, 2, 30, 1e-3f, true, 0},
                      Case{128, 2, 2, 30, 0.0f, false, 6}),
    Name);

}  // namespace
}  // namespace ridge::cuda
