// The paged GQA attention decode kernel (kernels/cuda/paged_attention.h) alone: one query row
// per sequence at context L over bf16 KV blocks of 16 tokens (each sequence's blocks scattered
// over the pool), the GKA-8B / Qwen3-8B attention shape by default (32 query heads, 8 kv heads of
// 128), timed with CUDA events: median microseconds a launch, the K and V bytes it must read
// against the device-to-device copy ceiling measured in the same run. PyTorch SDPA's figure on
// the same shapes comes from tools/bench/sdpa_anchor.py.
//
//   attention_kernel_bench [--batches 1,32,90] [--contexts 4096,16384,32768] [--q-heads 32]
//                          [--kv-heads 8] [--head-dim 128] [--repeats 30]
//                          [--splits 0,2,5 (0: the count picked)]
//                          [--prefill 2048,16384 (the tensor-core kernel over whole prompts)]
//                          [--kv-dtype bf16|fp8 (decode only)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/paged_attention.h"
#include "tools/bench/kernel_bench_support.h"

namespace {

// The tensor-core prefill kernel over a whole causal prompt of `length` rows (one sequence, its
// blocks scattered): median microseconds and TFLOP/s (4 D flops per query head per key).
void BenchPrefill(int length, int q_heads, int kv_heads, int d, int repeats, std::mt19937& rng) {
  constexpr int kBlockSize = 16;
  const int64_t block_elements = 2LL * kv_heads * kBlockSize * d;
  const int64_t blocks = (length + kBlockSize - 1) / kBlockSize;
  void* cache;
  CHECK_CUDA(cudaMalloc(&cache, blocks * block_elements * 2));
  CHECK_CUDA(cudaMemset(cache, 0, blocks * block_elements * 2));
  std::vector<int32_t> table = {0, 0, length, 0, 0};  // row_begin, .., sequence 0
  // [0] row_begin, [1] table_begin, [2] row_count, [3] start_position, [4] unused; then the
  // row sequences (all 0), the block table, the tiles.
  std::vector<int32_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t row_sequence = table.size();
  table.resize(table.size() + length, 0);
  const int64_t block_tables = table.size();
  table.insert(table.end(), order.begin(), order.end());
  const int64_t tiles = table.size();
  for (int r = 0; r < length; r += 16) table.push_back(r);
  const int num_tiles = (length + 15) / 16;
  int32_t* d_table;
  CHECK_CUDA(cudaMalloc(&d_table, table.size() * 4));
  CHECK_CUDA(cudaMemcpy(d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  const int64_t width = int64_t{q_heads + 2 * kv_heads} * d;
  std::vector<float> proj(int64_t{length} * width);
  std::normal_distribution<float> normal;
  for (float& x : proj) x = normal(rng);
  float* d_proj;
  void* out;
  CHECK_CUDA(cudaMalloc(&d_proj, proj.size() * 4));
  CHECK_CUDA(cudaMemcpy(d_proj, proj.data(), proj.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(&out, int64_t{length} * q_heads * d * 2));
  ridge::cuda::PagedAttentionArgs a{};
  a.step.rows = length;
  a.step.row_sequence = d_table + row_sequence;
  a.step.row_begin = d_table + 0;
  a.step.row_count = d_table + 2;
  a.step.start_position = d_table + 3;
  a.step.table_begin = d_table + 1;  // 0
  a.step.block_tables = d_table + block_tables;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.head_dim = d;
  a.proj = d_proj;
  a.proj_stride = width;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.paged = {cache, block_elements, 0, kBlockSize};
  a.out_bf16 = out;
  a.out_stride = int64_t{q_heads} * d;
  auto launch = [&] {
    return ridge::cuda::LaunchPagedPrefillAttention(a, d_table + tiles, num_tiles, nullptr);
  };
  CHECK_CUDA(launch());
  const double us = ridge::bench::MedianMicros(repeats, launch);
  const double flops = 4.0 * d * q_heads * (double(length) * (length + 1) / 2);
  std::printf("prefill %6d rows (causal, from position 0)  median %9.1f us  %.1f TFLOP/s\n", length,
              us, flops / (us * 1e-6) / 1e12);
  std::fflush(stdout);
  cudaFree(cache);
  cudaFree(d_table);
  cudaFree(d_proj);
  cudaFree(out);
}

}  // namespace

int main(int argc, char** argv) {
  using ridge::bench::IntList;
  std::vector<int> batches = {1, 32, 90}, contexts = {4096, 16384, 32768};
  int q_heads = 32, kv_heads = 8, d = 128, repeats = 30;
  std::vector<int> split_counts = {0};  // 0: the count PickAttentionSplits picks
  std::vector<int> prefill_lengths;
  bool fp8 = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batches") {
      batches = IntList(argv[i + 1]);
    } else if (flag == "--contexts") {
      contexts = IntList(argv[i + 1]);
    } else if (flag == "--q-heads") {
      q_heads = std::atoi(argv[i + 1]);
    } else if (flag == "--kv-heads") {
      kv_heads = std::atoi(argv[i + 1]);
    } else if (flag == "--head-dim") {
      d = std::atoi(argv[i + 1]);
    } else if (flag == "--splits") {
      split_counts = IntList(argv[i + 1]);
    } else if (flag == "--prefill") {
      prefill_lengths = IntList(argv[i + 1]);
    } else if (flag == "--kv-dtype") {
      fp8 = std::string(argv[i + 1]) == "fp8";
    } else if (flag == "--repeats") {
      repeats = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (!ridge::cuda::PagedAttentionSupports(q_heads, kv_heads, d)) {
    std::fprintf(stderr, "unsupported shape\n");
    return 2;
  }
  int sm_count = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  const double ceiling = ridge::bench::CopyCeiling(), read_ceiling = ridge::bench::ReadCeiling();
  std::printf(
      "paged attention decode, %d query / %d kv heads x %d, %s blocks of 16, copy "
      "ceiling %.3f TB/s, read-only stream %.3f TB/s\n",
      q_heads, kv_heads, d, fp8 ? "fp8" : "bf16", ceiling / 1e12, read_ceiling / 1e12);
  constexpr int kBlockSize = 16;
  // Elements of a block: bf16 keys and values, or fp8 ones with their scales (bytes).
  const int64_t block_elements =
      fp8 ? int64_t{kv_heads} * kBlockSize * ridge::cuda::Fp8KvBytesPerHeadToken(d)
          : 2LL * kv_heads * kBlockSize * d;
  const int64_t element_bytes = fp8 ? 1 : 2;
  std::mt19937 rng(3);
  for (const int length : prefill_lengths) BenchPrefill(length, q_heads, kv_heads, d, 5, rng);
  for (const int context : contexts) {
    for (const int batch : batches) {
      const int64_t per_sequence = (context + kBlockSize - 1) / kBlockSize;
      const int64_t blocks = per_sequence * batch;
      const size_t cache_bytes = blocks * block_elements * element_bytes;
      void* cache;
      if (cudaMalloc(&cache, cache_bytes) != cudaSuccess) {
        cudaGetLastError();
        std::printf("context %6d batch %3d: %zu bytes of KV do not fit\n", context, batch,
                    cache_bytes);
        continue;
      }
      CHECK_CUDA(cudaMemset(cache, 0, cache_bytes));
      // Step table: row s is sequence s at position context - 1; blocks shuffled over the pool.
      std::vector<int32_t> order(blocks);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<int32_t> table;
      const auto take = [&](std::vector<int32_t> v) {
        const int64_t at = static_cast<int64_t>(table.size());
        table.insert(table.end(), v.begin(), v.end());
        return at;
      };
      std::vector<int32_t> rows(batch), starts(batch, context - 1), begins(batch), ones(batch, 1);
      std::iota(rows.begin(), rows.end(), 0);
      for (int s = 0; s < batch; ++s) begins[s] = static_cast<int32_t>(s * per_sequence);
      const int64_t row_sequence = take(rows), row_begin = take(rows), row_count = take(ones),
                    start_position = take(starts), table_begin = take(begins),
                    block_tables = take(order);
      int32_t* d_table;
      CHECK_CUDA(cudaMalloc(&d_table, table.size() * 4));
      CHECK_CUDA(cudaMemcpy(d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
      const int64_t width = int64_t{q_heads + 2 * kv_heads} * d;
      std::vector<float> proj(batch * width);
      std::normal_distribution<float> normal;
      for (float& x : proj) x = normal(rng);
      float* d_proj;
      void* out;
      CHECK_CUDA(cudaMalloc(&d_proj, proj.size() * 4));
      CHECK_CUDA(cudaMemcpy(d_proj, proj.data(), proj.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMalloc(&out, int64_t{batch} * q_heads * d * 2));
      ridge::cuda::PagedAttentionArgs a{};
      a.step.rows = batch;
      a.step.row_sequence = d_table + row_sequence;
      a.step.row_begin = d_table + row_begin;
      a.step.row_count = d_table + row_count;
      a.step.start_position = d_table + start_position;
      a.step.table_begin = d_table + table_begin;
      a.step.block_tables = d_table + block_tables;
      a.q_heads = q_heads;
      a.kv_heads = kv_heads;
      a.head_dim = d;
      a.proj = d_proj;
      a.proj_stride = width;
      a.scale = 1.0f / std::sqrt(static_cast<float>(d));
      a.paged = {cache, block_elements, 0, kBlockSize, fp8};
      for (const int forced : split_counts) {
        {
          const ridge::cuda::AttentionSplitShape shape{.rows = batch,
                                                       .max_keys = context,
                                                       .q_heads = q_heads,
                                                       .kv_heads = kv_heads,
                                                       .head_dim = d,
                                                       .paged = true,
                                                       .block_size = kBlockSize,
                                                       .fp8 = fp8};
          a.max_splits = forced > 0 ? forced : ridge::cuda::PickAttentionSplits(shape, sm_count);
          float* partials = nullptr;
          const int64_t partial_floats =
              ridge::cuda::PagedAttentionScratchFloats(batch, q_heads, d, a.max_splits);
          if (partial_floats > 0) CHECK_CUDA(cudaMalloc(&partials, partial_floats * 4));
          a.partials = partials;
          a.out_bf16 = out;
          a.out_stride = int64_t{q_heads} * d;
          CHECK_CUDA(ridge::cuda::LaunchPagedAttention(a, nullptr));
          const double us = ridge::bench::MedianMicros(
              repeats, [&] { return ridge::cuda::LaunchPagedAttention(a, nullptr); });
          const double bytes =
              static_cast<double>(batch) * context * block_elements * element_bytes / kBlockSize;
          const double limit_us = bytes / ceiling * 1e6;
          std::printf(
              "context %6d batch %3d splits %3d%s x %5ld keys  median %8.1f us  KV %7.1f "
              "MB  %.2f TB/s  %.2fx the copy ceiling's time (%.1f us), %.0f%% of the read-only "
              "stream\n",
              context, batch, a.max_splits, forced > 0 ? "" : " (picked)",
              static_cast<long>((context + a.max_splits - 1) / a.max_splits), us, bytes / 1e6,
              bytes / (us * 1e-6) / 1e12, us / limit_us, limit_us,
              100.0 * bytes / (us * 1e-6) / read_ceiling);
          std::fflush(stdout);
          if (partials != nullptr) cudaFree(partials);
        }
      }
      cudaFree(cache);
      cudaFree(d_table);
      cudaFree(d_proj);
      cudaFree(out);
    }
  }
  return 0;
}
