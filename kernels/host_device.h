// RIDGE_HOST_DEVICE marks plain C++ functions that CUDA kernels call too (__host__ __device__
// under nvcc, nothing elsewhere), for headers shared by host code and kernels.
#pragma once

#if defined(__CUDACC__)
#define RIDGE_HOST_DEVICE __host__ __device__
#else
#define RIDGE_HOST_DEVICE
#endif
