// What the GPU's solvers report per (sequence, head), accumulated over every token and layer of
// one step: the host zeroes them before the step and merges them into SolverStats after.
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ridge::cuda {

struct SolveCounters {
  int32_t solves;
  int32_t total_iterations;
  int32_t max_iterations;
  int32_t capped;
  float sum_residual;
  float max_residual;

  // One solve; called by the one thread that owns this entry (no atomics).
  __host__ __device__ void Add(int32_t iterations, bool was_capped, float relative_residual) {
    solves += 1;
    total_iterations += iterations;
#ifdef __CUDA_ARCH__
    max_iterations = max(max_iterations, iterations);
#else
    max_iterations = iterations > max_iterations ? iterations : max_iterations;
#endif
    capped += was_capped ? 1 : 0;
    sum_residual += relative_residual;
#ifdef __CUDA_ARCH__
    max_residual = fmaxf(max_residual, relative_residual);
#else
    max_residual = relative_residual > max_residual ? relative_residual : max_residual;
#endif
  }

#ifdef __CUDACC__
  // One solve, from any of several threads that share this entry.
  __device__ void AtomicAdd(int32_t iterations, bool was_capped, float relative_residual) {
    atomicAdd(&solves, 1);
    atomicAdd(&total_iterations, iterations);
    atomicMax(&max_iterations, iterations);
    if (was_capped) atomicAdd(&capped, 1);
    atomicAdd(&sum_residual, relative_residual);
    // Residuals are >= 0, whose float bits order as integers do.
    atomicMax(reinterpret_cast<int32_t*>(&max_residual), __float_as_int(relative_residual));
  }
#endif
};

}  // namespace ridge::cuda
