// Times the products of a MesaNet decode step alone, as the CUDA backend calls cuBLAS
// (cublasGemmEx, bf16 in, fp32 accumulate and out): each at its width and, where that is not a
// multiple of 16, at the width padded to one (what the backend uploads). Each product runs over
// `--layers` copies of its weight in a CUDA graph, so weights stream from memory as in a model
// step and launch cost is a graph's; "GB/s" counts weight bytes only. For up to kFewRowsMax rows
// it also times the backend's own kernel for few rows (kernels/cuda/few_rows_gemm.h), with blocks
// of 8 and of 16 columns. The config's sizes may be overridden (--hidden, --inter, --proj,
// --vocab): the 8B hybrid's products are --hidden 4096 --inter 12288 --proj 6144 --vocab 151936
// (--proj: its attention layers' q/k/v) with --layers 18.
//
//   gemm_bench --config tools/bench/configs/mesanet-140m.json [--rows 1,16,64,256]
//              [--layers N (default: the config's)] [--reps 30]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/status_macros.h"
#include "kernels/cuda/few_rows_gemm.h"
#include "kernels/cuda/mesa_recurrence.h"
#include "models/checkpoint.h"
#include "models/cuda/cuda_backend.h"
#include "models/mesanet_config.h"
#include "server/cli_args.h"

namespace ridge::cuda {
namespace {

struct Options {
  int64_t hidden = 768, inter = 2048, proj = 2316, vocab = 50257;
  int layers = 14, reps = 30;
  std::vector<int> rows;
};

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gemm_bench: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

void CheckBlas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "gemm_bench: %s: %s\n", what, cublasGetStatusString(s));
  std::exit(1);
}

void* RandomBf16Device(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<uint16_t> host(count);
  for (uint16_t& v : host) v = FloatToBf16(normal(rng));
  void* d = nullptr;
  Check(cudaMalloc(&d, count * 2), "cudaMalloc");
  Check(cudaMemcpy(d, host.data(), count * 2, cudaMemcpyHostToDevice), "upload");
  return d;
}

// Microseconds per call of `enqueue(layer)`, from a graph of one call per layer replayed.
double TimeGraph(cudaStream_t stream, int layers, int reps,
                 const std::function<void(int)>& enqueue) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int l = 0; l < layers; ++l) enqueue(l);
  Check(cudaStreamEndCapture(stream, &graph), "end capture");
  Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int i = 0; i < 3; ++i) Check(cudaGraphLaunch(exec, stream), "warm-up");
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  Check(cudaEventRecord(start, stream), "record");
  for (int i = 0; i < reps; ++i) Check(cudaGraphLaunch(exec, stream), "replay");
  Check(cudaEventRecord(stop, stream), "record");
  Check(cudaEventSynchronize(stop), "sync");
  float ms = 0.0f;
  Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 1000.0 * ms / (static_cast<double>(reps) * layers);
}

// The same product through cuBLASLt: every algorithm its heuristic offers (up to 16), each
// timed as above. Prints the heuristic's first choice and the fastest.
void TimeLtAlgorithms(cublasLtHandle_t lt, cudaStream_t stream, int layers, int reps, int64_t n,
                      int64_t k, int rows, bool accumulate, const std::vector<void*>& w,
                      const void* x, float* y, void* workspace, size_t workspace_bytes) {
  cublasLtMatmulDesc_t desc;
  CheckBlas(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const cublasOperation_t trans = CUBLAS_OP_T;
  CheckBlas(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)),
      "transa");
  cublasLtMatrixLayout_t a, b, c;
  CheckBlas(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k), "layout a");
  CheckBlas(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, rows, k), "layout b");
  CheckBlas(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, n, rows, n), "layout c");
  cublasLtMatmulPreference_t pref;
  CheckBlas(cublasLtMatmulPreferenceCreate(&pref), "pref");
  CheckBlas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace_bytes, sizeof(workspace_bytes)),
            "pref workspace");
  cublasLtMatmulHeuristicResult_t results[16];
  int found = 0;
  CheckBlas(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 16, results, &found),
            "heuristic");
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  double first = 0.0, best = 1e30;
  int best_index = -1;
  for (int i = 0; i < found; ++i) {
    const double us = TimeGraph(stream, layers, reps, [&](int l) {
      CheckBlas(cublasLtMatmul(lt, desc, &alpha, w[l % w.size()], a, x, b, &beta, y, c, y, c,
                               &results[i].algo, workspace, workspace_bytes, stream),
                "cublasLtMatmul");
    });
    if (i == 0) first = us;
    if (us < best) best = us, best_index = i;
  }
  std::printf("  | Lt first %7.2f us, best %7.2f us (#%d of %d)", first, best, best_index, found);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(desc);
}

struct Product {
  const char* name;
  int64_t n, k;
  bool accumulate;
  int copies;  // weight copies cycled (the output layer has one)
};

void Run(const Options& o) {
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "stream");
  cublasHandle_t blas;
  CheckBlas(cublasCreate(&blas), "cublasCreate");
  CheckBlas(cublasSetStream(blas, stream), "cublasSetStream");
  void* blas_workspace = nullptr;
  Check(cudaMalloc(&blas_workspace, kCublasWorkspaceBytes), "cudaMalloc");
  CheckBlas(cublasSetWorkspace(blas, blas_workspace, kCublasWorkspaceBytes), "cublasSetWorkspace");
  cublasLtHandle_t lt;
  CheckBlas(cublasLtCreate(&lt), "cublasLtCreate");
  std::mt19937 rng(1);
  const std::vector<Product> products = {
      {"in_proj", o.proj, o.hidden, false, o.layers},
      {"o_proj", o.hidden, o.hidden, true, o.layers},
      {"gate_up", 2 * o.inter, o.hidden, false, o.layers},
      {"down", o.hidden, o.inter, true, o.layers},
      {"lm_head", o.vocab, o.hidden, false, 1},
  };
  const int max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  const int64_t max_k = std::max(o.hidden, o.inter);
  void* x = RandomBf16Device(max_rows * max_k, rng);
  std::printf("cuBLAS, us per product (weights streamed over %d layer copies), weight GB/s\n",
              o.layers);
  for (const Product& p : products) {
    const int64_t padded = (p.n + 15) / 16 * 16;  // the widest of the two runs
    std::vector<void*> w(p.copies);
    for (void*& v : w) v = RandomBf16Device(padded * p.k, rng);
    float* y = nullptr;
    Check(cudaMalloc(&y, max_rows * padded * sizeof(float)), "cudaMalloc");
    Check(cudaMemset(y, 0, max_rows * padded * sizeof(float)), "memset");
    for (int rows : o.rows) {
      const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
      std::printf("%-8s rows %3d k %5lld", p.name, rows, static_cast<long long>(p.k));
      for (const int64_t n : {p.n, padded}) {
        const double us = TimeGraph(stream, o.layers, o.reps, [&](int l) {
          CheckBlas(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), rows,
                                 static_cast<int>(p.k), &alpha, w[l % p.copies], CUDA_R_16BF,
                                 static_cast<int>(p.k), x, CUDA_R_16BF, static_cast<int>(p.k),
                                 &beta, y, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
        });
        std::printf("  | n %6lld %7.2f us (%5.0f GB/s)", static_cast<long long>(n), us,
                    2.0 * n * p.k / us * 1e-3);
        if (padded == p.n) break;
      }
      TimeLtAlgorithms(lt, stream, o.layers, o.reps, padded, p.k, rows, p.accumulate, w, x, y,
                       blas_workspace, kCublasWorkspaceBytes);
      if (FewRowsGemmSupports(rows, padded, p.k)) {
        for (const int n_tiles : {1, 2}) {
          const double us = TimeGraph(stream, o.layers, o.reps, [&](int l) {
            const FewRowsGemmArgs args{x,
                                       w[l % p.copies],
                                       y,
                                       rows,
                                       static_cast<int32_t>(padded),
                                       static_cast<int32_t>(p.k),
                                       static_cast<int32_t>(padded),
                                       p.accumulate};
            Check(LaunchFewRowsGemmTiles(args, n_tiles, stream), "LaunchFewRowsGemmTiles");
          });
          std::printf("  | few-rows, %2d columns a block %7.2f us (%5.0f GB/s)", 8 * n_tiles, us,
                      2.0 * padded * p.k / us * 1e-3);
        }
      }
      std::printf("\n");
    }
    for (void* v : w) cudaFree(v);
    cudaFree(y);
  }
  cudaFree(x);
  cudaFree(blas_workspace);
  cublasLtDestroy(lt);
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
}

absl::Status Main(int argc, char** argv) {
  ASSIGN_OR_RETURN(const CliArgs args, CliArgs::Parse(argc, argv,
                                                      {"config", "rows", "layers", "reps", "hidden",
                                                       "inter", "proj", "vocab"}));
  ASSIGN_OR_RETURN(const std::string config_path, args.String("config"));
  ASSIGN_OR_RETURN(const nlohmann::json json, ReadJsonFile(config_path));
  ASSIGN_OR_RETURN(const MesaNetConfig config, ParseMesaNetConfig(json));
  Options o;
  o.hidden = config.hidden_size;
  o.inter = config.intermediate_size;
  o.proj = DecayGateColumn(static_cast<int32_t>(config.num_heads),
                           static_cast<int32_t>(config.head_dim), config.use_output_gate) +
           2 * config.num_heads;
  o.vocab = config.vocab_size;
  ASSIGN_OR_RETURN(o.hidden, args.Int("hidden", o.hidden));
  ASSIGN_OR_RETURN(o.inter, args.Int("inter", o.inter));
  ASSIGN_OR_RETURN(o.proj, args.Int("proj", o.proj));
  ASSIGN_OR_RETURN(o.vocab, args.Int("vocab", o.vocab));
  for (const int64_t size : {o.hidden, o.inter, o.proj, o.vocab}) {
    if (size < 1 || size > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError("--hidden, --inter, --proj and --vocab must be 1 to 2^20");
    }
  }
  ASSIGN_OR_RETURN(const int64_t layers, args.Int("layers", config.num_hidden_layers));
  ASSIGN_OR_RETURN(const int64_t reps, args.Int("reps", 30));
  ASSIGN_OR_RETURN(const auto rows, args.NumberList("rows", "1,16,64,256"));
  if (layers < 1 || layers > 1000 || reps < 1 || reps > 100000) {
    return absl::InvalidArgumentError("--layers must be 1 to 1000, --reps 1 to 100000");
  }
  for (double r : rows) {
    if (!(r >= 1 && r <= 65536) || r != static_cast<int>(r)) {
      return absl::InvalidArgumentError("--rows must be whole numbers from 1 to 65536");
    }
    o.rows.push_back(static_cast<int>(r));
  }
  o.layers = static_cast<int>(layers);
  o.reps = static_cast<int>(reps);
  Run(o);
  return absl::OkStatus();
}

}  // namespace
}  // namespace ridge::cuda

int main(int argc, char** argv) {
  const absl::Status status = ridge::cuda::Main(argc - 1, argv + 1);
  if (!status.ok()) {
    std::fprintf(stderr, "gemm_bench: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  return 0;
}
