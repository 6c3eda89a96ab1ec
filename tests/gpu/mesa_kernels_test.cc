// The two GPU token-mixer paths (kernels/cuda: token-by-token recurrence and chunked prefill)
// against a float64 CPU version of spec section 2, one layer, stage by stage: normalised q/k,
// gates, chunk-start states, final state and conv tails, outputs. The solves use a tight
// tolerance so both sides reach the exact solution. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "kernels/cuda/mesa_chunked_prefill.h"
#include "kernels/cuda/mesa_recurrence.h"
#include "kernels/device_info.h"
#include "models/slot_packing.h"

namespace ridge::cuda {
namespace {

constexpr int kProjPadding = 5;  // columns after each in-projection row, as the backend pads

struct Shape {
  int d, h, w, n;
  bool gate;
  // Multiplies the starting Hs and lambda: A's condition stays as it is, but the first chunk's Hs
  // entries (about 4e5 at 2e7) go past f16's range (65504), which the chunked solve's f16
  // products must scale into.
  float state_scale = 1.0f;
};

struct Reference {
  std::vector<double> q, k, log_gamma, beta, out;  // [n, K], [n, K], [n, H], [n, H], [n, K]
  std::vector<double> final_state;                 // one layer of a slot
  std::vector<std::vector<double>> chunk_hs;       // Hs at every chunk start, per head
};

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Silu(double x) { return x * Sigmoid(x); }

// Solves (A) x = b for a small SPD matrix by Cholesky in float64.
std::vector<double> Solve(std::vector<double> a, std::vector<double> b, int d) {
  for (int j = 0; j < d; ++j) {
    for (int k = 0; k < j; ++k) a[j * d + j] -= a[j * d + k] * a[j * d + k];
    a[j * d + j] = std::sqrt(a[j * d + j]);
    for (int i = j + 1; i < d; ++i) {
      for (int k = 0; k < j; ++k) a[i * d + j] -= a[i * d + k] * a[j * d + k];
      a[i * d + j] /= a[j * d + j];
    }
  }
  for (int i = 0; i < d; ++i) {
    for (int k = 0; k < i; ++k) b[i] -= a[i * d + k] * b[k];
    b[i] /= a[i * d + i];
  }
  for (int i = d - 1; i >= 0; --i) {
    for (int k = i + 1; k < d; ++k) b[i] -= a[k * d + i] * b[k];
    b[i] /= a[i * d + i];
  }
  return b;
}

struct Inputs {
  Shape s;
  int K, P;
  std::vector<float> proj, state, q_conv, k_conv, lambda, a_bias, b_bias, o_norm;
};

Inputs MakeInputs(const Shape& s, uint32_t seed) {
  Inputs in{s, s.h * s.d, 0, {}, {}, {}, {}, {}, {}, {}, {}};
  in.P = (s.gate ? 4 : 3) * in.K + 2 * s.h;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  in.proj.resize(static_cast<size_t>(s.n) * in.P);
  for (float& x : in.proj) x = normal(rng);
  // One layer of a slot: Hs (SPD: a sum of decayed k k^T), Gs, tails.
  const int64_t layer = 2LL * s.h * s.d * s.d + 2LL * (s.w - 1) * in.K;
  in.state.assign(layer, 0.0f);
  for (int h = 0; h < s.h; ++h) {
    for (int r = 0; r < 8; ++r) {
      std::vector<float> v(s.d);
      double norm = 0;
      for (float& x : v) {
        x = normal(rng);
        norm += x * x;
      }
      for (int i = 0; i < s.d; ++i) {
        for (int j = 0; j < s.d; ++j) {
          in.state[(static_cast<int64_t>(h) * s.d + i) * s.d + j] +=
              s.state_scale * 0.3f * v[i] * v[j] / norm;
        }
      }
    }
    for (int64_t i = 0; i < static_cast<int64_t>(s.d) * s.d; ++i) {
      in.state[static_cast<int64_t>(s.h + h) * s.d * s.d + i] = 0.2f * normal(rng);
    }
  }
  for (int64_t i = 2LL * s.h * s.d * s.d; i < layer; ++i) in.state[i] = normal(rng);
  for (auto* v : {&in.q_conv, &in.k_conv}) {
    v->resize(static_cast<size_t>(in.K) * s.w);
    for (float& x : *v) x = 0.5f * normal(rng);
  }
  in.lambda.resize(in.K);
  for (float& x : in.lambda) x = s.state_scale * (0.25f + uniform(rng));
  in.a_bias.resize(s.h);
  in.b_bias.resize(s.h);
  for (float& x : in.a_bias) x = 2.0f + normal(rng);
  for (float& x : in.b_bias) x = normal(rng);
  in.o_norm.resize(s.d);
  for (float& x : in.o_norm) x = 0.5f + uniform(rng);
  return in;
}

Reference Compute(const Inputs& in) {
  const Shape& s = in.s;
  const int K = in.K, P = in.P, W = s.w, D = s.d, H = s.h;
  Reference ref;
  ref.final_state.assign(in.state.begin(), in.state.end());
  double* hs = ref.final_state.data();
  double* gs = hs + static_cast<int64_t>(H) * D * D;
  double* tails = gs + static_cast<int64_t>(H) * D * D;
  ref.q.resize(static_cast<size_t>(s.n) * K);
  ref.k.resize(static_cast<size_t>(s.n) * K);
  ref.out.resize(static_cast<size_t>(s.n) * K);
  ref.log_gamma.resize(static_cast<size_t>(s.n) * H);
  ref.beta.resize(static_cast<size_t>(s.n) * H);
  auto raw = [&](int which, int t, int ch) -> double {  // t < 0 reaches into the tail
    return t >= 0 ? in.proj[static_cast<int64_t>(t) * P + which * K + ch]
                  : in.state[2LL * H * D * D + static_cast<int64_t>(which) * (W - 1) * K +
                             static_cast<int64_t>(W - 1 + t) * K + ch];
  };
  for (int t = 0; t < s.n; ++t) {
    if (t % kPrefillChunk == 0) {
      for (int h = 0; h < H; ++h) {
        ref.chunk_hs.emplace_back(hs + static_cast<int64_t>(h) * D * D,
                                  hs + static_cast<int64_t>(h + 1) * D * D);
      }
    }
    const float* pr = &in.proj[static_cast<int64_t>(t) * P];
    for (int h = 0; h < H; ++h) {
      std::vector<double> q(D), k(D), v(D);
      for (int which = 0; which < 2; ++which) {
        double norm = 0;
        for (int i = 0; i < D; ++i) {
          const int ch = h * D + i;
          const auto& w = which == 0 ? in.q_conv : in.k_conv;
          double sum = 0;
          for (int j = 0; j < W; ++j) sum += w[ch * W + j] * raw(which, t - (W - 1) + j, ch);
          (which == 0 ? q : k)[i] = Silu(sum);
          norm += Silu(sum) * Silu(sum);
        }
        for (int i = 0; i < D; ++i) (which == 0 ? q : k)[i] /= std::sqrt(norm + 1e-6);
      }
      for (int i = 0; i < D; ++i) v[i] = pr[2 * K + h * D + i];
      const double ga = pr[P - 2 * H + h] + in.a_bias[h], gb = pr[P - H + h] + in.b_bias[h];
      const double gamma = Sigmoid(ga), beta = Sigmoid(gb);
      ref.log_gamma[t * H + h] = std::log(gamma);
      ref.beta[t * H + h] = beta;
      double* hh = hs + static_cast<int64_t>(h) * D * D;
      double* gg = gs + static_cast<int64_t>(h) * D * D;
      for (int i = 0; i < D; ++i) {
        for (int j = 0; j < D; ++j) {
          hh[i * D + j] = gamma * hh[i * D + j] + beta * k[i] * k[j];
          gg[i * D + j] = gamma * gg[i * D + j] + beta * k[i] * v[j];
        }
      }
      std::vector<double> a(hh, hh + D * D);
      for (int i = 0; i < D; ++i) a[i * D + i] += in.lambda[h * D + i];
      const std::vector<double> x = Solve(a, q, D);
      std::vector<double> o(D, 0.0);
      double sq = 0;
      for (int j = 0; j < D; ++j) {
        for (int i = 0; i < D; ++i) o[j] += x[i] * gg[i * D + j];
        sq += o[j] * o[j];
      }
      for (int j = 0; j < D; ++j) {
        double value = o[j] / std::sqrt(sq / D + 1e-6) * in.o_norm[j];
        if (s.gate) value *= Silu(pr[3 * K + h * D + j]);
        ref.out[static_cast<int64_t>(t) * K + h * D + j] = value;
      }
      for (int i = 0; i < D; ++i) {
        ref.q[static_cast<int64_t>(t) * K + h * D + i] = q[i];
        ref.k[static_cast<int64_t>(t) * K + h * D + i] = k[i];
      }
    }
  }
  for (int which = 0; which < 2; ++which) {
    for (int r = 0; r < W - 1; ++r) {
      for (int ch = 0; ch < K; ++ch) {
        tails[static_cast<int64_t>(which) * (W - 1) * K + static_cast<int64_t>(r) * K + ch] =
            raw(which, s.n - (W - 1) + r, ch);
      }
    }
  }
  return ref;
}

template <typename T>
T* Upload(const std::vector<T>& v) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(1, v.size()) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

template <typename T>
std::vector<T> Download(const T* d, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

template <typename T>
double RelativeError(const std::vector<T>& got, const double* want, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

class MesaKernelsTest : public ::testing::TestWithParam<Shape> {};

// The slot under test is slot 1 of a pool of 2, so slot offsets are exercised too.
TEST_P(MesaKernelsTest, BothPathsMatchTheFloat64Reference) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  const Shape s = GetParam();
  const Inputs in = MakeInputs(s, 1234 + s.d + s.n);
  const Reference ref = Compute(in);
  const int K = in.K, H = s.h, D = s.d;
  const SlotShape shape{1, H, D, s.w};  // the pool holds Hs packed (kernels/mesa_slot_layout.h)
  const int64_t layer_floats = shape.packed_layer_floats();
  const int chunks = (s.n + kPrefillChunk - 1) / kPrefillChunk;

  // Chunked prefill with the solve in whole chunks and in slices of 32 and 16 tokens, then token
  // by token in both block shapes (sm_count picks the shape: a huge one keeps 2 blocks per SM, 0
  // takes the 3-per-SM shape where head dim and conv allow it). Tolerance 1e-6 within 200
  // iterations, and tolerance 0 with the default budget of 30, where the chunked solve's late
  // iterations take single-pass f16 products (MesaPrefillArgs::single_pass_residual): whole
  // chunks both handed off to the f16 solve kernel and converted in place. The chunk-start
  // states are scanned by blocks of 32 rows, and once by blocks of 64.
  const struct {
    bool chunked;
    int solve_rows_or_sm_count;
    float tolerance;
    int max_iterations;
    float single_pass_residual;
    const char* name;
    bool hand_off = false;  // whole chunks at tolerance 0: through the f16 solve kernel
    int chunk_state_rows = 32;
  } paths[] = {{true, kPrefillChunk, 1e-6f, 200, 0.0f, "chunked prefill, whole chunks"},
               {true, kPrefillChunk, 1e-6f, 200, 0.0f,
                "chunked prefill, whole chunks, chunk states in blocks of 64 rows", false, 64},
               {true, 32, 1e-6f, 200, 0.0f, "chunked prefill, slices of 32 tokens"},
               {true, 16, 1e-6f, 200, 0.0f, "chunked prefill, slices of 16 tokens"},
               {true, kPrefillChunk, 0.0f, 30, 1e-2f,
                "chunked prefill, whole chunks, tolerance 0, handed off", true},
               {true, kPrefillChunk, 0.0f, 30, 1e-2f,
                "chunked prefill, whole chunks, tolerance 0, in place"},
               {true, 16, 0.0f, 30, 1e-2f, "chunked prefill, slices of 16 tokens, tolerance 0"},
               {false, 1 << 20, 1e-6f, 200, 0.0f, "token by token, 2 blocks per SM"},
               {false, 0, 1e-6f, 200, 0.0f, "token by token, 3 blocks per SM"},
               {false, 0, 0.0f, 30, 0.0f, "token by token, tolerance 0"}};
  for (const auto& path : paths) {
    const bool chunked = path.chunked;
    SCOPED_TRACE(path.name);
    std::vector<float> pool(2 * layer_floats, -7.0f);  // slot 0: poison that must stay
    PackSlot(shape, in.state, std::span<float>(pool).subspan(layer_floats));
    float* d_pool = Upload(pool);
    // The device rows carry padding columns of NaN, which the kernels must never read.
    const int proj_stride = in.P + kProjPadding;
    std::vector<float> padded_proj(static_cast<size_t>(s.n) * proj_stride, std::nanf(""));
    for (int t = 0; t < s.n; ++t) {
      std::copy_n(in.proj.begin() + static_cast<int64_t>(t) * in.P, in.P,
                  padded_proj.begin() + static_cast<int64_t>(t) * proj_stride);
    }
    float* d_proj = Upload(padded_proj);
    MesaLayerTensors weights{Upload(in.q_conv), Upload(in.k_conv), Upload(in.lambda),
                             Upload(in.a_bias), Upload(in.b_bias), Upload(in.o_norm)};
    int32_t* d_begin = Upload(std::vector<int32_t>{0});
    int32_t* d_count = Upload(std::vector<int32_t>{s.n});
    int32_t* d_slot = Upload(std::vector<int32_t>{1});
    float* d_tol = Upload(std::vector<float>{path.tolerance});
    int32_t* d_iters = Upload(std::vector<int32_t>{path.max_iterations});
    int32_t* d_zero = Upload(std::vector<int32_t>{0});
    int32_t* d_chunk_seq = Upload(std::vector<int32_t>(chunks, 0));
    SolveCounters* d_counters = Upload(std::vector<SolveCounters>(H, SolveCounters{}));
    uint16_t* d_out = Upload(std::vector<uint16_t>(static_cast<size_t>(s.n) * K, 0x7fc0));
    float* d_q = Upload(std::vector<float>(static_cast<size_t>(s.n) * K));
    float* d_k = Upload(std::vector<float>(static_cast<size_t>(s.n) * K));
    float* d_lg = Upload(std::vector<float>(static_cast<size_t>(s.n) * H));
    float* d_beta = Upload(std::vector<float>(static_cast<size_t>(s.n) * H));
    float* d_chunk_states = Upload(std::vector<float>(static_cast<size_t>(chunks) * H * 2 * D * D));
    float* d_handoff = Upload(
        std::vector<float>(static_cast<size_t>(chunks) * H * MesaChunkedPrefillHandoffFloats(D)));
    // The fields both launch-argument structs share.
    auto fill_common = [&](auto& a) {
      a.weights = weights;
      a.num_heads = H;
      a.head_dim = D;
      a.conv_size = s.w;
      a.output_gate = s.gate;
      a.norm_eps = 1e-6f;
      a.proj = d_proj;
      a.proj_stride = proj_stride;
      a.state_pool = d_pool;
      a.slot_floats = layer_floats;
      a.layer_floats = layer_floats;
      a.layer = 0;
      a.out_bf16 = d_out;
      a.counters = d_counters;
    };
    if (chunked) {
      MesaPrefillArgs a{};
      fill_common(a);
      a.table = {d_begin, d_count, d_slot, d_tol, d_iters, d_zero, d_chunk_seq, 1, chunks};
      a.q_norm = d_q;
      a.k_norm = d_k;
      a.log_gamma = d_lg;
      a.beta = d_beta;
      a.chunk_states = d_chunk_states;
      a.handoff = path.hand_off ? d_handoff : nullptr;
      a.solve_rows = path.solve_rows_or_sm_count;
      a.chunk_state_rows = path.chunk_state_rows;
      a.single_pass_residual = path.single_pass_residual;
      ASSERT_EQ(LaunchMesaChunkedPrefill(a, nullptr), cudaSuccess);
    } else {
      MesaRecurrenceArgs a{};
      fill_common(a);
      a.sequences = {d_begin, d_count, d_slot, d_tol, d_iters, d_zero};
      a.num_sequences = 1;
      a.sm_count = path.solve_rows_or_sm_count;
      ASSERT_EQ(LaunchMesaRecurrence(a, nullptr), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    const std::vector<float> got_pool = Download(d_pool, pool.size());
    EXPECT_TRUE(std::all_of(got_pool.begin(), got_pool.begin() + layer_floats, [](float x) {
      return x == -7.0f;
    })) << "slot 0 was written";
    std::vector<float> state(in.state.size());
    UnpackSlot(shape, std::span<const float>(got_pool).subspan(layer_floats), state);
    const int64_t hs_floats = static_cast<int64_t>(H) * D * D;
    const double hs_err = RelativeError(state, ref.final_state.data(), hs_floats);
    const double gs_err = RelativeError(std::vector<float>(state.begin() + hs_floats, state.end()),
                                        ref.final_state.data() + hs_floats, hs_floats);
    const double tail_err =
        RelativeError(std::vector<float>(state.begin() + 2 * hs_floats, state.end()),
                      ref.final_state.data() + 2 * hs_floats, state.size() - 2 * hs_floats);
    std::vector<float> out(static_cast<size_t>(s.n) * K);
    const std::vector<uint16_t> bits = Download(d_out, out.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToFloat(bits[i]);
    const double out_err = RelativeError(out, ref.out.data(), out.size());
    if (!(out_err < 1e-2)) {  // where it goes wrong: per token, NaNs (unwritten) and error
      for (int i = 0; i < 24; ++i) {
        std::printf("  token 0 column %d: got %.4f want %.4f\n", i, out[i], ref.out[i]);
      }
      for (int t = 0; t < s.n; ++t) {
        int nans = 0;
        for (int i = 0; i < K; ++i) nans += std::isnan(out[static_cast<size_t>(t) * K + i]);
        const double e =
            RelativeError(std::vector<float>(out.begin() + static_cast<int64_t>(t) * K,
                                             out.begin() + static_cast<int64_t>(t + 1) * K),
                          ref.out.data() + static_cast<int64_t>(t) * K, K);
        if (t < 4 || t % 16 == 0 || nans) {
          std::printf("  token %d: %d NaN, error %.2e, got %.4f %.4f want %.4f %.4f\n", t, nans, e,
                      out[static_cast<size_t>(t) * K], out[static_cast<size_t>(t) * K + 1],
                      ref.out[static_cast<size_t>(t) * K], ref.out[static_cast<size_t>(t) * K + 1]);
        }
      }
    }
    // An output off by more than rounding differs from the reference rounded to bf16 only where
    // the reference lies that close to a rounding boundary: with a relative error e, about
    // e / 2^-8 of the outputs. A solve as accurate as fp32 leaves well under 1%; one-pass TF32
    // products throughout (error about 3e-4) leave several times that.
    int64_t off = 0;
    for (size_t i = 0; i < out.size(); ++i) off += bits[i] != FloatToBf16(ref.out[i]);
    const double off_fraction = static_cast<double>(off) / out.size();
    std::printf(
        "%s d%d h%d n%d: Hs %.2e Gs %.2e tails %.2e out %.2e (%.3f%% not the rounded "
        "reference)\n",
        path.name, D, H, s.n, hs_err, gs_err, tail_err, out_err, 100 * off_fraction);
    EXPECT_LT(off_fraction, 0.01);
    EXPECT_LT(hs_err, 1e-5);
    EXPECT_LT(gs_err, 1e-5);
    EXPECT_EQ(tail_err, 0.0);
    EXPECT_LT(out_err, 1e-2);  // bf16 output
    if (chunked) {
      const double q_err = RelativeError(Download(d_q, ref.q.size()), ref.q.data(), ref.q.size());
      const double k_err = RelativeError(Download(d_k, ref.k.size()), ref.k.data(), ref.k.size());
      const double lg_err = RelativeError(Download(d_lg, ref.log_gamma.size()),
                                          ref.log_gamma.data(), ref.log_gamma.size());
      const double beta_err =
          RelativeError(Download(d_beta, ref.beta.size()), ref.beta.data(), ref.beta.size());
      const std::vector<float> cs =
          Download(d_chunk_states, static_cast<size_t>(chunks) * H * 2 * D * D);
      double cs_err = 0;
      for (int c = 0; c < chunks; ++c) {
        for (int h = 0; h < H; ++h) {
          const float* got = cs.data() + ((static_cast<int64_t>(c) * H + h) * 2) * D * D;
          cs_err = std::max(cs_err, RelativeError(std::vector<float>(got, got + D * D),
                                                  ref.chunk_hs[c * H + h].data(), D * D));
        }
      }
      std::printf("  q %.2e k %.2e log_gamma %.2e beta %.2e chunk-start Hs %.2e\n", q_err, k_err,
                  lg_err, beta_err, cs_err);
      EXPECT_LT(q_err, 1e-5);
      EXPECT_LT(k_err, 1e-5);
      EXPECT_LT(lg_err, 1e-5);
      EXPECT_LT(beta_err, 1e-5);
      EXPECT_LT(cs_err, 1e-5);
    }
    const std::vector<SolveCounters> counters = Download(d_counters, H);
    for (int h = 0; h < H; ++h) {
      EXPECT_EQ(counters[h].solves, s.n);
      if (path.tolerance > 0) {
        EXPECT_EQ(counters[h].capped, 0) << "tolerance 1e-6 not reached in 200 iterations";
      }
    }
    for (void* p :
         {static_cast<void*>(d_pool), static_cast<void*>(d_proj), static_cast<void*>(d_begin),
          static_cast<void*>(d_count), static_cast<void*>(d_slot), static_cast<void*>(d_tol),
          static_cast<void*>(d_iters), static_cast<void*>(d_zero), static_cast<void*>(d_chunk_seq),
          static_cast<void*>(d_counters), static_cast<void*>(d_out), static_cast<void*>(d_q),
          static_cast<void*>(d_k), static_cast<void*>(d_lg), static_cast<void*>(d_beta),
          static_cast<void*>(d_chunk_states), static_cast<void*>(d_handoff)}) {
      cudaFree(p);
    }
    for (const float* p : {weights.q_conv, weights.k_conv, weights.lambda, weights.a_bias,
                           weights.b_bias, weights.o_norm}) {
      cudaFree(const_cast<float*>(p));
    }
  }
}

// Host code: runs without a GPU too.
TEST(PickSolveRowsTest, SlicesAChunkOnlyWhileTheSlicesHoldingTokensFitTheSms) {
  const std::vector<int32_t> one_short{24}, sixteen_short(16, 12), mixed{64, 100, 20};
  EXPECT_EQ(PickSolveRows(one_short.data(), one_short.size(), 6, 132), 16);  // 2 slices x 6 heads
  EXPECT_EQ(PickSolveRows(one_short.data(), one_short.size(), 6, 11),
            32);  // 1 slice of 32 x 6 heads
  EXPECT_EQ(PickSolveRows(one_short.data(), one_short.size(), 6, 5), kPrefillChunk);
  // Prompts of 12 tokens fill one slice of 16 each, however many chunks the step has.
  EXPECT_EQ(PickSolveRows(sixteen_short.data(), sixteen_short.size(), 6, 132), 16);
  EXPECT_EQ(PickSolveRows(sixteen_short.data(), sixteen_short.size(), 6, 95), kPrefillChunk);
  // 4 + 7 + 2 slices of 16 tokens, 2 + 4 + 1 of 32.
  EXPECT_EQ(PickSolveRows(mixed.data(), mixed.size(), 2, 26), 16);
  EXPECT_EQ(PickSolveRows(mixed.data(), mixed.size(), 2, 25), 32);
  EXPECT_EQ(PickSolveRows(mixed.data(), mixed.size(), 2, 14), 32);
  EXPECT_EQ(PickSolveRows(mixed.data(), mixed.size(), 2, 13), kPrefillChunk);
  EXPECT_EQ(PickSolveRows(nullptr, 0, 6, 132), 16);  // no prompt: nothing launches
}

// Host code: runs without a GPU too.
TEST(PickChunkStateRowsTest, SixtyFourRowsOnlyWhenBlocksOf32WouldNotAllFitTheSms) {
  // 140M, 8 prompts: 8 x 6 heads x 2 matrices x 4 blocks of 32 rows = 384 blocks, 3 an SM fit.
  EXPECT_EQ(PickChunkStateRows(8, 6, 128, 132), 32);
  EXPECT_EQ(PickChunkStateRows(8, 12, 128, 132), 64);  // 1B: 768 blocks of 32
  EXPECT_EQ(PickChunkStateRows(8, 6, 128, 127), 64);   // 384 > 3 x 127
  EXPECT_EQ(PickChunkStateRows(100, 6, 64, 132), 64);  // head dim 64: 2 blocks of 32 a matrix
  EXPECT_EQ(PickChunkStateRows(0, 6, 128, 132), 32);
}

// Host code: runs without a GPU too.
TEST(PrefillHandsOffTest, OnlyWhenTheWholeChunksOutnumberTheSms) {
  EXPECT_FALSE(PrefillHandsOff(8, 12, 132));   // one 512-token prompt, 12 heads: 96 blocks
  EXPECT_FALSE(PrefillHandsOff(11, 12, 132));  // 132 blocks: one an SM
  EXPECT_TRUE(PrefillHandsOff(12, 11, 131));
  EXPECT_TRUE(PrefillHandsOff(256, 6, 132));  // 8 x 2048 tokens, 6 heads
}

INSTANTIATE_TEST_SUITE_P(Shapes, MesaKernelsTest,
                         ::testing::Values(Shape{64, 2, 4, 100, true}, Shape{128, 2, 4, 150, false},
                                           Shape{64, 3, 2, 40, false}, Shape{128, 1, 4, 64, true},
                                           Shape{128, 2, 3, 40, true},
                                           Shape{128, 2, 4, 100, false, 2e7f}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           char name[64];  // (std::string + chains trip GCC 12's -Wrestrict)
                           std::snprintf(name, sizeof(name), "d%d_h%d_w%d_n%d%s%s", s.d, s.h, s.w,
                                         s.n, s.gate ? "_gate" : "",
                                         s.state_scale != 1.0f ? "_large_state" : "");
                           return std::string(name);
                         });

}  // namespace
}  // namespace ridge::cuda
