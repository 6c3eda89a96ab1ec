// The GKA recurrence kernel (kernels/cuda/gka_recurrence.h) alone, one decode token per sequence
// on random q/k/v (normalised by the kernel, with o_norm and the output gate) and states of the
// GKA-8B layer shape (32 expanded heads of 128; BENCHMARKS.md), timed with CUDA events: median
// microseconds a launch over --repeats, the state bytes it must move (Hs, packed to its upper
// block triangle as the pool keeps it, and Ss read and written once) against the device-to-device
// copy ceiling measured in the same run, and the anchor's figures (vLLM's Triton
// chebyshev_iteration_gqa on an H200, BENCHMARKS.md) beside them.
//
//   gka_kernel_bench [--batches 64,96] [--iterations 30,10,1] [--heads 32] [--head-dim 128]
//                    [--repeats 50] [--tokens 1 (a prompt piece per sequence: per-token time)]
//                    [--token-by-token 1 (prompt pieces without the chunked kernel)]
//                    [--tensor-cores 0,1 (the chunked kernel's state products on the CUDA
//                    cores, the tensor cores, or each in turn)]
//                    [--tolerances 0,1e-3 (each sequence's relative residual tolerance; 0 runs
//                    every iteration, above it the mean iterations a solve are printed)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gka_recurrence.h"
#include "kernels/gka_slot_layout.h"
#include "tools/bench/kernel_bench_support.h"

namespace {

using ridge::bench::CopyCeiling;
using ridge::bench::IntList;

// The anchor's microseconds a layer at batch 64 / 96 for num_iter 30 / 10 / 1 (BENCHMARKS.md).
double Anchor(int batch, int iterations) {
  if (batch == 64)
    return iterations == 30 ? 374 : iterations == 10 ? 192 : iterations == 1 ? 144 : 0;
  if (batch == 96)
    return iterations == 30 ? 537 : iterations == 10 ? 273 : iterations == 1 ? 215 : 0;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {64, 96}, iteration_list = {30, 10, 1}, tensor_core_list = {0};
  std::vector<float> tolerance_list = {0.0f};
  int heads = 32, d = 128, repeats = 50, tokens = 1, token_by_token = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batches")
      batches = IntList(argv[i + 1]);
    else if (flag == "--iterations")
      iteration_list = IntList(argv[i + 1]);
    else if (flag == "--heads")
      heads = std::atoi(argv[i + 1]);
    else if (flag == "--head-dim")
      d = std::atoi(argv[i + 1]);
    else if (flag == "--tokens")
      tokens = std::atoi(argv[i + 1]);
    else if (flag == "--token-by-token")
      token_by_token = std::atoi(argv[i + 1]);
    else if (flag == "--tensor-cores")
      tensor_core_list = IntList(argv[i + 1]);
    else if (flag == "--tolerances")
      tolerance_list = ridge::bench::FloatList(argv[i + 1]);
    else if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (!ridge::cuda::IsGkaHeadDim(d)) {
    std::fprintf(stderr, "--head-dim must be 64 or 128\n");
    return 2;
  }
  const double ceiling = CopyCeiling();
  std::printf(
      "GKA recurrence kernel, %d heads x %d, %d token(s) a sequence%s, device copy "
      "ceiling %.3f TB/s\n",
      heads, d, tokens, token_by_token != 0 ? " (token by token)" : "", ceiling / 1e12);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const int batch : batches) {
    const int64_t pairs = int64_t{batch} * heads;
    const int64_t slot_floats = ridge::GkaSlotLayerFloats(heads, d, 0);
    // q, k, v per expanded head (random: the kernel normalises q and k), the gates' raw
    // projections (0: beta 0.5, alpha 0.5, decay exp(-0.05 ln 2)) and g.
    const int64_t qkv_width = 3 * int64_t{heads} * d, gate_width = 3 * heads + int64_t{heads} * d;
    const int64_t rows = int64_t{batch} * tokens;
    std::vector<float> qkv(rows * qkv_width), proj(rows * gate_width, 0.0f);
    for (float& x : qkv) x = normal(rng);
    std::vector<float> zeros(heads, 0.0f), rates(heads, 0.05f), ones(d, 1.0f);
    float *d_qkv, *d_proj, *pool, *zero, *rate, *o_norm, *tol;
    int32_t *max_it, *slot, *begin, *count;
    void* out;
    ridge::cuda::SolveCounters* counters;
    CHECK_CUDA(cudaMalloc(&d_qkv, qkv.size() * 4));
    CHECK_CUDA(cudaMalloc(&d_proj, proj.size() * 4));
    CHECK_CUDA(cudaMalloc(&pool, batch * slot_floats * 4));
    CHECK_CUDA(cudaMalloc(&zero, heads * 4));
    CHECK_CUDA(cudaMalloc(&rate, heads * 4));
    CHECK_CUDA(cudaMalloc(&o_norm, d * 4));
    CHECK_CUDA(cudaMalloc(&tol, batch * 4));
    CHECK_CUDA(cudaMalloc(&out, rows * heads * d * 2));
    CHECK_CUDA(cudaMalloc(&max_it, batch * 4));
    CHECK_CUDA(cudaMalloc(&slot, batch * 4));
    CHECK_CUDA(cudaMalloc(&begin, batch * 4));
    CHECK_CUDA(cudaMalloc(&count, batch * 4));
    CHECK_CUDA(cudaMalloc(&counters, pairs * sizeof(ridge::cuda::SolveCounters)));
    CHECK_CUDA(cudaMemcpy(d_qkv, qkv.data(), qkv.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_proj, proj.data(), proj.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(zero, zeros.data(), heads * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(rate, rates.data(), heads * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(o_norm, ones.data(), d * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(tol, 0, batch * 4));
    CHECK_CUDA(cudaMemset(pool, 0, batch * slot_floats * 4));
    CHECK_CUDA(cudaMemset(counters, 0, pairs * sizeof(ridge::cuda::SolveCounters)));
    std::vector<int32_t> slots(batch), begins(batch), counts(batch, tokens);
    for (int s = 0; s < batch; ++s) {
      slots[s] = s;
      begins[s] = s * tokens;
    }
    CHECK_CUDA(cudaMemcpy(slot, slots.data(), batch * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(begin, begins.data(), batch * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(count, counts.data(), batch * 4, cudaMemcpyHostToDevice));
    ridge::cuda::GkaRecurrenceArgs args{};
    args.num_sequences = batch;
    args.q_heads = args.k_heads = args.v_heads = args.heads = heads;
    args.head_dim = d;
    args.max_tokens = token_by_token != 0 ? 0 : tokens;
    CHECK_CUDA(cudaDeviceGetAttribute(&args.sm_count, cudaDevAttrMultiProcessorCount, 0));
    args.sequences = {begin, count, slot, tol, max_it};
    args.qkv = d_qkv;
    args.qkv_stride = qkv_width;
    args.proj = d_proj;
    args.proj_stride = gate_width;
    args.a_column = 0;
    args.b_column = heads;
    args.alpha_column = 2 * heads;
    args.g_column = 3 * heads;
    args.b_bias = args.alpha_bias = args.dt_bias = zero;
    args.decay_rate = rate;
    args.o_norm = o_norm;
    args.state_pool = pool;
    args.slot_floats = slot_floats;
    args.ridge_strength = 0.02f;
    args.solve = true;
    args.out_bf16 = out;
    args.out_stride = int64_t{heads} * d;
    args.counters = counters;
    args.counters_stride = heads;
    // A few tokens first, so the states are not zero.
    std::vector<int32_t> caps(batch, 30);
    CHECK_CUDA(cudaMemcpy(max_it, caps.data(), batch * 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < 4; ++i) CHECK_CUDA(ridge::cuda::LaunchGkaRecurrence(args, nullptr));
    // Hs and Ss, read and written.
    const double bytes = 2.0 * pairs * (ridge::PackedHsFloats(d) + int64_t{d} * d) * 4;
    for (const int iterations : iteration_list) {
      for (const float tolerance : tolerance_list) {
        for (const int tensor_cores : tensor_core_list) {
          args.tensor_core_products = tensor_cores != 0;
          std::fill(caps.begin(), caps.end(), iterations);
          CHECK_CUDA(cudaMemcpy(max_it, caps.data(), batch * 4, cudaMemcpyHostToDevice));
          const std::vector<float> tolerances(batch, tolerance);
          CHECK_CUDA(cudaMemcpy(tol, tolerances.data(), batch * 4, cudaMemcpyHostToDevice));
          CHECK_CUDA(cudaMemset(counters, 0, pairs * sizeof(ridge::cuda::SolveCounters)));
          const double us = ridge::bench::MedianMicros(
              repeats, [&] { return ridge::cuda::LaunchGkaRecurrence(args, nullptr); });
          std::vector<ridge::cuda::SolveCounters> solved(pairs);
          CHECK_CUDA(cudaMemcpy(solved.data(), counters, pairs * sizeof(solved[0]),
                                cudaMemcpyDeviceToHost));
          double solves = 0, total_iterations = 0;
          for (const auto& c : solved) {
            solves += c.solves;
            total_iterations += c.total_iterations;
          }
          const double limit_us = bytes / ceiling * 1e6;
          const double anchor = heads == 32 && d == 128 ? Anchor(batch, iterations) : 0;
          std::printf(
              "batch %3d  iterations %2d  tolerance %g (%.1f iterations a solve)  median %7.1f us"
              "  state %6.1f MB  %.2f TB/s  %.2fx the byte limit (%.1f us)  anchor %.0f us "
              "(%.2fx)  %.2f us a token%s\n",
              batch, iterations, tolerance, solves > 0 ? total_iterations / solves : 0.0, us,
              bytes / 1e6, bytes / (us * 1e-6) / 1e12, us / limit_us, limit_us,
              tokens == 1 ? anchor : 0.0, tokens == 1 && anchor > 0 ? anchor / us : 0.0,
              us / tokens, tensor_cores != 0 ? "  (chunked: tensor cores)" : "");
          std::fflush(stdout);
        }
      }
    }
    for (void* p :
         {static_cast<void*>(d_qkv), static_cast<void*>(d_proj), static_cast<void*>(pool),
          static_cast<void*>(zero), static_cast<void*>(rate), static_cast<void*>(o_norm),
          static_cast<void*>(tol), out, static_cast<void*>(max_it), static_cast<void*>(slot),
          static_cast<void*>(begin), static_cast<void*>(count)}) {
      cudaFree(p);
    }
    cudaFree(counters);
  }
  return 0;
}
