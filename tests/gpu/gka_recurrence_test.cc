// The GKA recurrence kernel (kernels/cuda/gka_recurrence.h) against the CPU's GkaHeadStep
// (kernels/gka_step.h, which the hybrid goldens check against a float64 reference) with the
// spec's L2 norms, gates, o_norm and output gate around it: head sizes 64 and 128, odd batch
// sizes, GQA expansions (q, k and v heads fewer than the expanded heads), zero to 76 tokens per
// sequence, slots out of order, tolerance 0 / 1e-3 / 1e-6, caps of 1 and 30 iterations, num_iter
// 0 (no solve), states that went through many tokens and a state of zeros, sequences without
// tokens, more (sequence, head) pairs than the GPU holds blocks at once, prompt pieces through the
// chunked kernel; outputs, the states written back and the solver counters. Skips without a GPU.
#include "kernels/cuda/gka_recurrence.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/gka_slot_layout.h"
#include "kernels/gka_step.h"
#include "tests/gpu/device_array.h"

namespace ridge::cuda {
namespace {

struct Case {
  int head_dim, sequences, heads, q_heads, kv_heads;
  int tokens;  // a sequence's tokens in the step: this, or one more for odd sequences
  int max_iterations;
  float tolerance;
  bool solve;
  int history;                // tokens already in the states (0: a state of zeros)
  bool tensor_cores = false;  // the chunked kernel's state products on the tensor cores
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream name;
  name << "d" << c.head_dim << "_b" << c.sequences << "_h" << c.heads << "q" << c.q_heads << "k"
       << c.kv_heads << "_t" << c.tokens << "_it" << c.max_iterations << "_tol"
       << (c.tolerance > 0 ? -std::lround(std::log10(c.tolerance)) : 0)
       << (c.solve ? "" : "_nosolve") << "_hist" << c.history << (c.tensor_cores ? "_tc" : "");
  return name.str();
}

class GkaRecurrenceTest : public ::testing::TestWithParam<Case> {};

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

TEST_P(GkaRecurrenceTest, MatchesTheCpuStep) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const int d = c.head_dim, hx = c.heads, n = c.sequences;
  std::mt19937 rng(d * 1000 + n * 10 + hx);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  // The CPU's states (Hs [hx, d, d], Ss [hx, d, d] a slot) and the GPU pool's, whose layer
  // (kernels/gka_slot_layout.h: Hs packed) sits at offset 32 of a slot with room after it.
  const int64_t cpu_floats = 2 * int64_t{hx} * d * d;
  const int64_t slot_floats = GkaSlotLayerFloats(hx, d, 0) + 64;
  const int64_t layer_offset = 32;
  const int slots = n + 2;
  std::vector<float> cpu(slots * cpu_floats, 0.0f);
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
      float* hs = &cpu[slot[s] * cpu_floats + int64_t{h} * d * d];
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
  // Element (i, j) of head h's Hs and Ss in a slot of each layout.
  auto cpu_hs = [&](int sl, int h, int i, int j) {
    return sl * cpu_floats + (int64_t{h} * d + i) * d + j;
  };
  auto cpu_ss = [&](int sl, int h, int i, int j) {
    return cpu_hs(sl, h, i, j) + int64_t{hx} * d * d;
  };
  auto gpu_hs = [&](int sl, int h, int i, int j) {
    return sl * slot_floats + layer_offset + GkaSlotHsOffset(d, h) +
           PackedHsElement<int64_t>(d, i, j);
  };
  auto gpu_ss = [&](int sl, int h, int i, int j) {
    return sl * slot_floats + layer_offset + GkaSlotSsOffset(hx, d, h) + int64_t{i} * d + j;
  };
  std::vector<float> pool(slots * slot_floats, 0.0f);
  for (int s = 0; s < n; ++s) {
    for (int h = 0; h < hx; ++h) {
      for (int i = 0; i < d; ++i) {
        for (int j = 0; j < d; ++j) {
          pool[gpu_hs(slot[s], h, i, j)] = cpu[cpu_hs(slot[s], h, i, j)];
          pool[gpu_ss(slot[s], h, i, j)] = cpu[cpu_ss(slot[s], h, i, j)];
        }
      }
    }
  }
  // The step both sides take: sequence s has c.tokens + s % 2 tokens (rows in order); q and k
  // raw (the kernel normalises them), the gates' raw projections, g.
  const int qh = c.q_heads, kh = c.kv_heads, width = (qh + 2 * kh) * d;
  const int gate_width = 3 * hx + hx * d;  // a | b | alpha | g
  std::vector<int32_t> row_begin(n), row_count(n);
  int rows = 0;
  for (int s = 0; s < n; ++s) {
    row_begin[s] = rows;
    row_count[s] = c.tokens + s % 2;
    rows += row_count[s];
  }
  std::normal_distribution<float> normal;
  std::vector<float> qkv(rows * width), proj(rows * gate_width), o_norm(d);
  for (float& x : qkv) x = normal(rng);
  for (float& x : proj) x = normal(rng);
  for (float& x : o_norm) x = 0.5f + uniform(rng);
  std::vector<float> b_bias(hx), alpha_bias(hx), decay_rate(hx), dt_bias(hx);
  for (int h = 0; h < hx; ++h) {
    b_bias[h] = normal(rng);
    alpha_bias[h] = normal(rng);
    decay_rate[h] = 0.1f + uniform(rng);
    dt_bias[h] = normal(rng);
  }
  std::vector<float> tolerance(n, c.tolerance);
  std::vector<int32_t> max_iterations(n, c.max_iterations);
  if (n > 1) tolerance[1] = 0.0f;  // sequences keep their own budgets

  DeviceArray<float> d_pool(pool), d_qkv(qkv), d_proj(proj), d_tol(tolerance), d_onorm(o_norm),
      d_b(b_bias), d_alpha(alpha_bias), d_rate(decay_rate), d_dt(dt_bias);
  DeviceArray<uint16_t> d_out(std::vector<uint16_t>(rows * hx * d, 0));
  DeviceArray<int32_t> d_max(max_iterations), d_slot(slot), d_begin(row_begin), d_count(row_count);
  const int stride = hx + 1;  // counters of sequence s at s * stride
  DeviceArray<SolveCounters> d_counters(std::vector<SolveCounters>(n * stride, SolveCounters{}));
  GkaRecurrenceArgs args{};
  args.num_sequences = n;
  args.q_heads = qh;
  args.k_heads = kh;
  args.v_heads = kh;
  args.heads = hx;
  args.head_dim = d;
  args.max_tokens = *std::max_element(row_count.begin(), row_count.end());
  args.tensor_core_products = c.tensor_cores;
  ASSERT_EQ(cudaDeviceGetAttribute(&args.sm_count, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  args.sequences = {d_begin.get(), d_count.get(), d_slot.get(), d_tol.get(), d_max.get()};
  args.qkv = d_qkv.get();
  args.qkv_stride = width;
  args.proj = d_proj.get();
  args.proj_stride = gate_width;
  args.a_column = 0;
  args.b_column = hx;
  args.alpha_column = 2 * hx;
  args.g_column = 3 * hx;
  args.b_bias = d_b.get();
  args.alpha_bias = d_alpha.get();
  args.decay_rate = d_rate.get();
  args.dt_bias = d_dt.get();
  args.o_norm = d_onorm.get();
  args.norm_eps = 1e-6f;
  args.state_pool = d_pool.get();
  args.slot_floats = slot_floats;
  args.layer_offset = layer_offset;
  args.ridge_strength = 0.02f;
  args.solve = c.solve;
  args.out_bf16 = d_out.get();
  args.out_stride = hx * d;
  args.counters = d_counters.get();
  args.counters_stride = stride;
  ASSERT_EQ(LaunchGkaRecurrence(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> gpu_pool = d_pool.Download();
  const std::vector<uint16_t> gpu_out = d_out.Download();
  const std::vector<SolveCounters> counters = d_counters.Download();

  auto sigmoid = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  auto softplus = [](float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); };
  auto l2 = [&](const float* x) {
    std::vector<float> y(x, x + d);
    double n2 = 0;
    for (float v : y) n2 += double(v) * v;
    for (float& v : y) v = static_cast<float>(v / (std::sqrt(n2) + 1e-6));
    return y;
  };
  double out_diff = 0, out_norm = 0, state_diff = 0, state_norm = 0;
  for (int s = 0; s < n; ++s) {
    for (int h = 0; h < hx; ++h) {
      float* hs = &cpu[cpu_hs(slot[s], h, 0, 0)];
      float* ss = &cpu[cpu_ss(slot[s], h, 0, 0)];
      SolveCounters expected{};
      for (int t = 0; t < row_count[s]; ++t) {
        const int r = row_begin[s] + t;
        const float* row = &qkv[r * width];
        const float* gates = &proj[r * gate_width];
        const auto q = l2(row + (h / (hx / qh)) * d);
        const auto k = l2(row + qh * d + (h / (hx / kh)) * d);
        const float* v = row + (qh + kh) * d + (h / (hx / kh)) * d;
        const GkaHeadInputs in{q.data(),
                               k.data(),
                               v,
                               sigmoid(gates[hx + h] + b_bias[h]) + 1e-6f,
                               sigmoid(gates[2 * hx + h] + alpha_bias[h]),
                               -decay_rate[h] * softplus(gates[h] + dt_bias[h]),
                               0.02f,
                               c.solve};
        const auto result = GkaHeadStep(in, d, {tolerance[s], max_iterations[s]}, hs, ss,
                                        out_cpu.data(), scratch.data());
        if (result.has_value()) {
          expected.Add(result->iterations, result->capped, result->relative_residual);
        }
        double mean_square = 0;
        for (int i = 0; i < d; ++i) mean_square += double(out_cpu[i]) * out_cpu[i] / d;
        for (int i = 0; i < d; ++i) {
          const float g = gates[3 * hx + h * d + i];
          const double want =
              out_cpu[i] / std::sqrt(mean_square + 1e-6) * o_norm[i] * g * sigmoid(g);
          const uint32_t bits = uint32_t{gpu_out[(int64_t{r} * hx + h) * d + i]} << 16;
          float got;
          std::memcpy(&got, &bits, 4);
          out_diff += std::pow(got - want, 2);
          out_norm += want * want;
        }
      }
      // Every element of both, Hs's below the diagonal read from its mirror.
      for (int i = 0; i < d; ++i) {
        for (int j = 0; j < d; ++j) {
          for (const auto& [got, want] :
               {std::pair{gpu_pool[gpu_hs(slot[s], h, i, j)], cpu[cpu_hs(slot[s], h, i, j)]},
                std::pair{gpu_pool[gpu_ss(slot[s], h, i, j)], cpu[cpu_ss(slot[s], h, i, j)]}}) {
            state_diff += std::pow(double(got) - want, 2);
            state_norm += std::pow(double(want), 2);
          }
        }
      }
      const SolveCounters& got = counters[s * stride + h];
      EXPECT_EQ(got.solves, expected.solves) << "sequence " << s << " head " << h;
      // Float sums in another order can put a residual on the other side of the tolerance.
      EXPECT_NEAR(got.total_iterations, expected.total_iterations,
                  tolerance[s] > 0 ? row_count[s] : 0)
          << "sequence " << s << " head " << h;
      EXPECT_NEAR(got.capped, expected.capped, tolerance[s] > 0 ? 1 : 0);
      EXPECT_NEAR(got.sum_residual, expected.sum_residual,
                  1e-3 * row_count[s] + 0.05 * expected.sum_residual);
    }
  }
  // bf16 outputs: about 2^-9 relative each.
  EXPECT_LT(std::sqrt(out_diff / std::max(out_norm, 1e-30)), 4e-3);
  EXPECT_LT(std::sqrt(state_diff / std::max(state_norm, 1e-30)), 1e-5);
  // Slots no sequence names are untouched, and so are the floats around a named slot's layer.
  const int64_t layer_end = layer_offset + GkaSlotLayerFloats(hx, d, 0);
  for (int s = 0; s < slots; ++s) {
    const bool named = std::find(slot.begin(), slot.end(), s) != slot.end();
    for (int64_t i = 0; i < slot_floats; ++i) {
      if (named && i >= layer_offset && i < layer_end) continue;
      ASSERT_EQ(gpu_pool[s * slot_floats + i], 0.0f) << "slot " << s << " float " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GkaRecurrenceTest,
    ::testing::Values(
        Case{128, 3, 4, 1, 1, 1, 30, 0.0f, true, 12}, Case{128, 5, 4, 2, 2, 2, 30, 1e-3f, true, 40},
        Case{128, 1, 8, 4, 2, 7, 30, 1e-6f, true, 3}, Case{64, 7, 3, 3, 3, 1, 30, 0.0f, true, 20},
        Case{64, 2, 4, 4, 1, 3, 1, 0.0f, true, 5}, Case{64, 3, 2, 1, 1, 16, 30, 1e-3f, true, 0},
        Case{128, 2, 2, 2, 1, 2, 30, 0.0f, false, 6},
        // Past the launch's table of Chebyshev weights (64),
        // the weights are computed as the solve goes.
        Case{128, 3, 4, 2, 2, 1, 100, 0.0f, true, 7}, Case{64, 2, 2, 1, 1, 3, 70, 0.0f, true, 4},
        // More (sequence, head) items than resident blocks
        // (several waves); with tokens 0, even sequences
        // have none.
        Case{128, 41, 8, 4, 2, 1, 30, 0.0f, true, 10},
        Case{128, 45, 8, 4, 2, 0, 30, 1e-3f, true, 10},
        Case{64, 150, 4, 2, 2, 0, 10, 0.0f, true, 8},
        // Prompt pieces through the chunked kernel (head_dim
        // 128, >= 16 tokens): whole and partial chunks of 32,
        // beside shorter sequences token by token.
        Case{128, 3, 4, 2, 2, 40, 30, 0.0f, true, 5}, Case{128, 2, 8, 4, 2, 75, 30, 1e-3f, true, 0},
        Case{128, 4, 2, 1, 1, 15, 10, 1e-6f, true, 30},
        Case{128, 2, 2, 2, 1, 33, 30, 0.0f, false, 6},
        // A (sequence, head) takes 4, 2 or 1 blocks of the
        // chunked kernel as the GPU has room: the cases above
        // take 4 on a GPU of 132 SMs, these 2 and 1.
        Case{128, 5, 8, 4, 2, 20, 30, 0.0f, true, 4}, Case{128, 9, 8, 4, 2, 17, 10, 1e-3f, true, 2},
        // The same chunked shapes with the products on the
        // tensor cores (4, 2 and 1 blocks a head).
        Case{128, 3, 4, 2, 2, 40, 30, 0.0f, true, 5, true},
        Case{128, 2, 8, 4, 2, 75, 30, 1e-3f, true, 0, true},
        Case{128, 4, 2, 1, 1, 15, 10, 1e-6f, true, 30, true},
        Case{128, 2, 2, 2, 1, 33, 30, 0.0f, false, 6, true},
        Case{128, 5, 8, 4, 2, 20, 30, 0.0f, true, 4, true},
        Case{128, 9, 8, 4, 2, 17, 10, 1e-3f, true, 2, true}),
    Name);

}  // namespace
}  // namespace ridge::cuda
