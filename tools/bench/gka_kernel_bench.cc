// The GKA decode kernel (kernels/cuda/gka_decode.h) alone, on random unit q/k and states of the
// GKA-8B layer shape (32 expanded heads of 128; BENCHMARKS.md), timed with CUDA events: median
// microseconds a launch over --repeats, the state bytes it must move (Hs and Ss read and written
// once) against the device-to-device copy ceiling measured in the same run, and the anchor's
// figures (vLLM's Triton chebyshev_iteration_gqa on an H200, BENCHMARKS.md) beside them.
//
//   gka_kernel_bench [--batches 64,96] [--iterations 30,10,1] [--heads 32] [--head-dim 128]
//                    [--repeats 50]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gka_decode.h"

namespace {

std::vector<int> IntList(const char* text) {
  std::vector<int> out;
  std::string s(text);
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    out.push_back(std::atoi(s.substr(start, comma - start).c_str()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

#define CHECK_CUDA(call)                                              \
  do {                                                                \
    const cudaError_t e = (call);                                     \
    if (e != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e)); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

// Read + write bytes per second of a 2 GiB device-to-device copy.
double CopyCeiling() {
  const size_t bytes = size_t{1} << 31;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best = 1e30f;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::min(best, ms);
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (best * 1e-3);
}

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
  std::vector<int> batches = {64, 96}, iteration_list = {30, 10, 1};
  int heads = 32, d = 128, repeats = 50;
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
    else if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (!ridge::cuda::IsGkaDecodeHeadDim(d)) {
    std::fprintf(stderr, "--head-dim must be 64 or 128\n");
    return 2;
  }
  const double ceiling = CopyCeiling();
  std::printf("GKA decode kernel, %d heads x %d, device copy ceiling %.3f TB/s\n", heads, d,
              ceiling / 1e12);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const int batch : batches) {
    const int64_t pairs = int64_t{batch} * heads;
    const int64_t slot_floats = 2 * int64_t{heads} * d * d;
    std::vector<float> unit(pairs * d), gates(pairs, 0.5f), decay(pairs, -0.05f);
    for (int64_t p = 0; p < pairs; ++p) {
      double n2 = 0;
      for (int i = 0; i < d; ++i) {
        unit[p * d + i] = normal(rng);
        n2 += double(unit[p * d + i]) * unit[p * d + i];
      }
      for (int i = 0; i < d; ++i) unit[p * d + i] /= static_cast<float>(std::sqrt(n2));
    }
    float *q, *pool, *gate, *log_decay, *tol, *out;
    int32_t *max_it, *slot;
    ridge::cuda::SolveCounters* counters;
    CHECK_CUDA(cudaMalloc(&q, unit.size() * 4));
    CHECK_CUDA(cudaMalloc(&pool, batch * slot_floats * 4));
    CHECK_CUDA(cudaMalloc(&gate, pairs * 4));
    CHECK_CUDA(cudaMalloc(&log_decay, pairs * 4));
    CHECK_CUDA(cudaMalloc(&tol, batch * 4));
    CHECK_CUDA(cudaMalloc(&out, pairs * d * 4));
    CHECK_CUDA(cudaMalloc(&max_it, batch * 4));
    CHECK_CUDA(cudaMalloc(&slot, batch * 4));
    CHECK_CUDA(cudaMalloc(&counters, pairs * sizeof(ridge::cuda::SolveCounters)));
    CHECK_CUDA(cudaMemcpy(q, unit.data(), unit.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(gate, gates.data(), pairs * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(log_decay, decay.data(), pairs * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(tol, 0, batch * 4));
    CHECK_CUDA(cudaMemset(pool, 0, batch * slot_floats * 4));
    CHECK_CUDA(cudaMemset(counters, 0, pairs * sizeof(ridge::cuda::SolveCounters)));
    std::vector<int32_t> slots(batch);
    for (int s = 0; s < batch; ++s) slots[s] = s;
    CHECK_CUDA(cudaMemcpy(slot, slots.data(), batch * 4, cudaMemcpyHostToDevice));
    ridge::cuda::GkaDecodeArgs args{.num_sequences = batch,
                                    .heads = heads,
                                    .head_dim = d,
                                    .q = q,
                                    .k = q,
                                    .v = q,
                                    .beta = gate,
                                    .alpha = gate,
                                    .log_decay = log_decay,
                                    .tolerance = tol,
                                    .max_iterations = max_it,
                                    .slot = slot,
                                    .state_pool = pool,
                                    .slot_floats = slot_floats,
                                    .layer_offset = 0,
                                    .ridge_strength = 0.02f,
                                    .solve = true,
                                    .out = out,
                                    .counters = counters};
    // A few tokens first, so the states are not zero.
    std::vector<int32_t> caps(batch, 30);
    CHECK_CUDA(cudaMemcpy(max_it, caps.data(), batch * 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < 4; ++i) CHECK_CUDA(ridge::cuda::LaunchGkaDecode(args, nullptr));
    const double bytes = 2.0 * 2.0 * pairs * d * d * 4;  // Hs and Ss, read and written
    for (const int iterations : iteration_list) {
      std::fill(caps.begin(), caps.end(), iterations);
      CHECK_CUDA(cudaMemcpy(max_it, caps.data(), batch * 4, cudaMemcpyHostToDevice));
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      std::vector<float> times;
      for (int r = 0; r < repeats; ++r) {
        cudaEventRecord(start);
        CHECK_CUDA(ridge::cuda::LaunchGkaDecode(args, nullptr));
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms;
        cudaEventElapsedTime(&ms, start, stop);
        times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      const double us = times[times.size() / 2] * 1e3;
      const double limit_us = bytes / ceiling * 1e6;
      const double anchor = heads == 32 && d == 128 ? Anchor(batch, iterations) : 0;
      std::printf(
          "batch %3d  iterations %2d  median %7.1f us  state %6.1f MB  %.2f TB/s  "
          "%.2fx the byte limit (%.1f us)  anchor %.0f us (%.2fx)\n",
          batch, iterations, us, bytes / 1e6, bytes / (us * 1e-6) / 1e12, us / limit_us, limit_us,
          anchor, anchor > 0 ? anchor / us : 0.0);
      std::fflush(stdout);
    }
    cudaFree(q);
    cudaFree(pool);
    cudaFree(gate);
    cudaFree(log_decay);
    cudaFree(tol);
    cudaFree(out);
    cudaFree(max_it);
    cudaFree(slot);
    cudaFree(counters);
  }
  return 0;
}
