// What the single-kernel benchmarks (gka_kernel_bench, attention_kernel_bench) share: comma
// lists of numbers from flags, a CUDA check that exits, the device's copy and read ceilings and a
// median of timed launches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ridge::bench {

// The numbers of a comma list, each read by `parse` (std::atoi, std::atof).
template <typename T, typename Parse>
std::vector<T> NumberList(const char* text, Parse parse) {
  std::vector<T> out;
  std::string s(text);
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    out.push_back(static_cast<T>(parse(s.substr(start, comma - start).c_str())));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

inline std::vector<int> IntList(const char* text) {
  return NumberList<int>(text, [](const char* s) { return std::atoi(s); });
}

inline std::vector<float> FloatList(const char* text) {
  return NumberList<float>(text, [](const char* s) { return std::atof(s); });
}

#define CHECK_CUDA(call)                                              \
  do {                                                                \
    const cudaError_t e = (call);                                     \
    if (e != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e)); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

// Read + write bytes per second of a 2 GiB device-to-device copy (the best of 5).
inline double CopyCeiling() {
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
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * bytes / (best * 1e-3);
}

// Bytes per second of a read-only stream over 4 GiB (the best of 20; tools/bench/read_ceiling.cu).
double ReadCeiling();

// The median microseconds of `repeats` launches, each timed with events.
template <typename Launch>
double MedianMicros(int repeats, const Launch& launch) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  for (int r = 0; r < repeats; ++r) {
    cudaEventRecord(start);
    CHECK_CUDA(launch());
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2] * 1e3;
}

}  // namespace ridge::bench
