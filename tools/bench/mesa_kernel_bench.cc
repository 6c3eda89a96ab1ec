// Times the MesaNet token-mixer kernels alone (kernels/cuda), without the rest of a model step:
// the decode kernel (one launch per layer for a batch of one-token sequences) and the chunked
// prefill (its four launches), each with CG budgets of 0, 1 and N iterations at tolerance 0, so
// the cost of one CG iteration is the slope; the prefill twice, with 3xTF32 products and with
// single-pass ones from the first iteration (MesaPrefillArgs::single_pass_residual). Random inputs
// with the shapes of a config's layer.
//
//   mesa_kernel_bench [--heads 6] [--head-dim 128] [--conv 4] [--batches 1,16,64,256]
//                     [--iterations 30] [--prefill-batch 8] [--prefill-tokens 2048] [--reps 20]
//                     [--sm-count N (as if the GPU had N SMs: picks the decode block shape and
//                     the prefill solve's slices and chunk-state blocks; 1 keeps whole chunks)]
//                     [--layers 14 (state layers per slot; consecutive launches cycle through
//                      them, so the state is not L2-resident, as in a model step)]
//                     [--timeline DIR (a build with -DRIDGE_DECODE_TIMELINE=ON: the decode
//                      kernel's per-block phase clocks of each batch's last launch at the full
//                      budget, to DIR/decode_timeline_b<batch>.txt; summarise them with
//                      tools/bench/decode_timeline.py)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/mesa_chunked_prefill.h"
#include "kernels/cuda/mesa_recurrence.h"
#include "kernels/device_info.h"
#include "kernels/mesa_slot_layout.h"
#include "models/slot_packing.h"

namespace ridge::cuda {
namespace {

struct Options {
  int heads = 6, head_dim = 128, conv = 4, iterations = 30, reps = 20;
  std::vector<int> batches = {1, 16, 64, 256};
  int prefill_batch = 8, prefill_tokens = 2048;
  int sm_count = 0;  // 0: the device's (it picks the decode kernel's block shape)
  int layers = 14;
  std::string timeline_dir;  // empty: no timeline
};

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "mesa_kernel_bench: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// The device buffers of one measurement, freed with it.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : buffers_) cudaFree(p);
  }

  void* Allocate(size_t bytes) {
    void* d = nullptr;
    Check(cudaMalloc(&d, std::max<size_t>(bytes, 1)), "cudaMalloc");
    buffers_.push_back(d);
    return d;
  }

  template <typename T>
  T* Upload(const std::vector<T>& v) {
    T* d = static_cast<T*>(Allocate(v.size() * sizeof(T)));
    Check(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return d;
  }

 private:
  std::vector<void*> buffers_;
};

std::vector<float> Normal(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// One layer's weights and a pool of `slots` slots holding the same SPD Hs (a sum of rank-1
// terms) for every head, random Gs and tails.
struct Layer {
  int H, D, W, K, P;
  int64_t layer_floats;
  int layers;  // copies of the layer's state per slot
  MesaLayerTensors weights;
  float* pool;
};

Layer MakeLayer(const Options& o, int slots, std::mt19937& rng, DeviceBuffers& mem) {
  Layer l{
      o.heads,  o.head_dim, o.conv, o.heads * o.head_dim, 3 * o.heads * o.head_dim + 2 * o.heads, 0,
      o.layers, {},         nullptr};
  const int D = l.D;
  const SlotShape shape{1, l.H, D, l.W};
  l.layer_floats = shape.packed_layer_floats();
  std::vector<float> hs(static_cast<size_t>(D) * D, 0.0f);
  for (int term = 0; term < 64; ++term) {
    std::vector<float> k = Normal(D, 1.0f, rng);
    float norm = 0.0f;
    for (float x : k) norm += x * x;
    for (int i = 0; i < D; ++i) {
      for (int j = 0; j < D; ++j) hs[i * D + j] += 0.3f * k[i] * k[j] / norm;
    }
  }
  std::vector<float> state(shape.state_layer_floats());  // MesaState's layout, then packed
  for (int h = 0; h < l.H; ++h) std::copy(hs.begin(), hs.end(), state.begin() + h * D * D);
  std::vector<float> rest = Normal(state.size() - l.H * D * D, 0.2f, rng);
  std::copy(rest.begin(), rest.end(), state.begin() + l.H * D * D);
  std::vector<float> slot(l.layer_floats);
  PackSlot(shape, state, slot);
  std::vector<float> pool;
  pool.reserve(slot.size() * slots * l.layers);
  for (int s = 0; s < slots * l.layers; ++s) pool.insert(pool.end(), slot.begin(), slot.end());
  l.pool = mem.Upload(pool);
  std::vector<float> lambda(l.K), o_norm(D, 1.0f);
  std::uniform_real_distribution<float> uniform(0.25f, 1.25f);
  for (float& x : lambda) x = uniform(rng);
  l.weights = {mem.Upload(Normal(static_cast<size_t>(l.K) * l.W, 0.5f, rng)),
               mem.Upload(Normal(static_cast<size_t>(l.K) * l.W, 0.5f, rng)),
               mem.Upload(lambda),
               mem.Upload(std::vector<float>(l.H, 2.0f)),
               mem.Upload(std::vector<float>(l.H, 0.0f)),
               mem.Upload(o_norm)};
  return l;
}

template <typename Args>
void FillCommon(Args& a, const Layer& l, const float* proj, void* out, SolveCounters* counters) {
  a.weights = l.weights;
  a.num_heads = l.H;
  a.head_dim = l.D;
  a.conv_size = l.W;
  a.output_gate = false;
  a.norm_eps = 1e-6f;
  a.proj = proj;
  a.proj_stride = l.P;
  a.state_pool = l.pool;
  a.slot_floats = l.layer_floats * l.layers;
  a.layer_floats = l.layer_floats;
  a.layer = 0;
  a.out_bf16 = out;
  a.counters = counters;
}

// Median milliseconds of `reps` runs of launch() after two warm-up runs.
template <typename Launch>
float MedianMs(int reps, Launch launch) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 2; ++i) Check(launch(), "launch");
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    Check(cudaEventRecord(start), "record");
    Check(launch(), "launch");
    Check(cudaEventRecord(stop), "record");
    Check(cudaEventSynchronize(stop), "sync");
    float t = 0.0f;
    Check(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double MeanIterations(const SolveCounters* d, int n) {
  std::vector<SolveCounters> c(n);
  Check(cudaMemcpy(c.data(), d, n * sizeof(SolveCounters), cudaMemcpyDeviceToHost), "counters");
  double solves = 0, iterations = 0;
  for (const SolveCounters& x : c) solves += x.solves, iterations += x.total_iterations;
  return solves > 0 ? iterations / solves : 0.0;
}

// The decode kernel's phase timeline of its last launch (`launch_blocks` blocks; the first
// kDecodeTimelineBlocks are recorded) to dir/decode_timeline_b<batch>.txt: a header of field
// names, then a line a block.
void WriteDecodeTimeline(const std::string& dir, int batch, int launch_blocks) {
  const int blocks = std::min(launch_blocks, kDecodeTimelineBlocks);
  if (blocks < launch_blocks) {
    std::fprintf(stderr, "mesa_kernel_bench: timeline of batch %d: the first %d of %d blocks\n",
                 batch, blocks, launch_blocks);
  }
  std::vector<int64_t> record(static_cast<size_t>(blocks) * kDecodeTimelineFields);
  const cudaError_t e = CopyDecodeTimeline(record.data(), blocks);
  if (e == cudaErrorNotSupported) {
    std::fprintf(stderr,
                 "mesa_kernel_bench: --timeline needs a build with RIDGE_DECODE_TIMELINE\n");
    std::exit(2);
  }
  Check(e, "timeline copy");
  const std::string path = dir + "/decode_timeline_b" + std::to_string(batch) + ".txt";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "mesa_kernel_bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fprintf(f,
               "entry hs_loaded inputs solve_start iteration8 iteration16 solve_end readout "
               "output exit sm entry_ns exit_ns\n");
  for (int b = 0; b < blocks; ++b) {
    for (int k = 0; k < kDecodeTimelineFields; ++k) {
      std::fprintf(
          f, k + 1 < kDecodeTimelineFields ? "%lld " : "%lld\n",
          static_cast<long long>(record[static_cast<size_t>(b) * kDecodeTimelineFields + k]));
    }
  }
  std::fclose(f);
}

void BenchDecode(const Options& o, int sm_count, std::mt19937& rng) {
  std::printf("decode kernel: %d heads x %d, conv %d; one token per sequence, tolerance 0\n",
              o.heads, o.head_dim, o.conv);
  std::printf("%6s %10s %10s %10s %12s %12s\n", "batch", "0 it us", "1 it us",
              (std::to_string(o.iterations) + " it us").c_str(), "us/iteration", "mean iters");
  for (const int b : o.batches) {
    DeviceBuffers mem;
    Layer l = MakeLayer(o, b, rng, mem);
    float* proj = mem.Upload(Normal(static_cast<size_t>(b) * l.P, 1.0f, rng));
    void* out = mem.Allocate(static_cast<size_t>(b) * l.K * 2);
    std::vector<int32_t> begin(b), ones(b, 1), zeros(b, 0), jacobi(b, 1);
    for (int i = 0; i < b; ++i) begin[i] = i;
    SolveCounters* counters = mem.Upload(std::vector<SolveCounters>(b * l.H));
    MesaRecurrenceArgs a{};
    FillCommon(a, l, proj, out, counters);
    a.num_sequences = b;
    a.sm_count = sm_count;
    float times[3];
    const int budgets[3] = {0, 1, o.iterations};
    double mean = 0.0;
    for (int i = 0; i < 3; ++i) {
      a.sequences = {mem.Upload(begin),
                     mem.Upload(ones),
                     mem.Upload(begin),
                     mem.Upload(std::vector<float>(b, 0.0f)),
                     mem.Upload(std::vector<int32_t>(b, budgets[i])),
                     mem.Upload(jacobi)};
      Check(cudaMemset(counters, 0, b * l.H * sizeof(SolveCounters)), "memset");
      times[i] = MedianMs(o.reps, [&] {
        a.layer = (a.layer + 1) % l.layers;
        LaunchMesaRecurrence(a, nullptr);
        return cudaGetLastError();
      });
      if (i == 2) mean = MeanIterations(counters, b * l.H);
      if (i == 2 && !o.timeline_dir.empty()) WriteDecodeTimeline(o.timeline_dir, b, b * l.H);
    }
    std::printf("%6d %10.2f %10.2f %10.2f %12.3f %12.2f\n", b, 1e3f * times[0], 1e3f * times[1],
                1e3f * times[2], 1e3 * (times[2] - times[1]) / std::max(1, o.iterations - 1), mean);
  }
}

// One line per CG budget (0, 1, o.iterations) of the prefill launches in `a`.
void BenchPrefillBudgets(const Options& o, DeviceBuffers& mem, MesaPrefillArgs& a,
                         const std::vector<int32_t>& begin, const std::vector<int32_t>& count,
                         const std::vector<int32_t>& slot, const std::vector<int32_t>& chunk_begin,
                         const std::vector<int32_t>& chunk_seq, SolveCounters* counters) {
  const int b = static_cast<int>(begin.size()), chunks = static_cast<int>(chunk_seq.size());
  const int rows = b * o.prefill_tokens;
  float previous = 0.0f;
  for (const int budget : {0, 1, o.iterations}) {
    a.table = {mem.Upload(begin),
               mem.Upload(count),
               mem.Upload(slot),
               mem.Upload(std::vector<float>(b, 0.0f)),
               mem.Upload(std::vector<int32_t>(b, budget)),
               mem.Upload(chunk_begin),
               mem.Upload(chunk_seq),
               b,
               chunks};
    Check(cudaMemset(counters, 0, b * a.num_heads * sizeof(SolveCounters)), "memset");
    const float ms = MedianMs(o.reps, [&] {
      a.layer = (a.layer + 1) % o.layers;
      LaunchMesaChunkedPrefill(a, nullptr);
      return cudaGetLastError();
    });
    std::printf("%10d %10.3f %12.0f %12.2f %12.2f\n", budget, ms, rows / (ms * 1e-3),
                MeanIterations(counters, b * a.num_heads),
                budget == o.iterations ? 1e3 * (ms - previous) / std::max(1, budget - 1) : 0.0);
    previous = ms;
  }
}

void BenchPrefill(const Options& o, int sm_count, std::mt19937& rng) {
  const int b = o.prefill_batch, n = o.prefill_tokens, rows = b * n;
  const int chunks_per = (n + kPrefillChunk - 1) / kPrefillChunk, chunks = b * chunks_per;
  DeviceBuffers mem;
  Layer l = MakeLayer(o, b, rng, mem);
  float* proj = mem.Upload(Normal(static_cast<size_t>(rows) * l.P, 1.0f, rng));
  void* out = mem.Allocate(static_cast<size_t>(rows) * l.K * 2);
  std::vector<int32_t> begin(b), count(b, n), slot(b), chunk_begin(b), chunk_seq(chunks);
  for (int j = 0; j < b; ++j) begin[j] = j * n, slot[j] = j, chunk_begin[j] = j * chunks_per;
  for (int c = 0; c < chunks; ++c) chunk_seq[c] = c / chunks_per;
  SolveCounters* counters = mem.Upload(std::vector<SolveCounters>(b * l.H));
  MesaPrefillArgs a{};
  FillCommon(a, l, proj, out, counters);
  a.solve_rows = PickSolveRows(count.data(), b, l.H, sm_count);
  a.chunk_state_rows = PickChunkStateRows(b, l.H, o.head_dim, sm_count);
  const std::vector<float> zeros_rk(static_cast<size_t>(rows) * l.K);
  a.q_norm = mem.Upload(zeros_rk);
  a.k_norm = mem.Upload(zeros_rk);
  a.log_gamma = mem.Upload(std::vector<float>(static_cast<size_t>(rows) * l.H));
  a.beta = mem.Upload(std::vector<float>(static_cast<size_t>(rows) * l.H));
  a.chunk_states =
      mem.Upload(std::vector<float>(static_cast<size_t>(chunks) * l.H * 2 * l.D * l.D));
  a.handoff = mem.Upload(
      std::vector<float>(static_cast<size_t>(chunks) * l.H * MesaChunkedPrefillHandoffFloats(l.D)));
  // 3xTF32 products throughout, then one f16 pass from the first iteration on (a residual
  // bound of 1 holds at once): the two ends of the solve's single-pass switch.
  for (const float single_pass : {0.0f, 1.0f}) {
    a.single_pass_residual = single_pass;
    std::printf(
        "chunked prefill: %d x %d tokens, tolerance 0, %s products\n%10s %10s %12s %12s %12s\n", b,
        n, single_pass > 0 ? "single-pass f16" : "3xTF32", "iterations", "ms", "tok/s",
        "mean iters", "us/iteration");
    BenchPrefillBudgets(o, mem, a, begin, count, slot, chunk_begin, chunk_seq, counters);
  }
}

std::vector<int> ParseList(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    v.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    if (end == p || v.back() <= 0) {
      std::fprintf(stderr, "mesa_kernel_bench: bad list '%s'\n", s);
      std::exit(2);
    }
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "mesa_kernel_bench: %s needs a value\n", flag.c_str());
      return 2;
    }
    const char* value = argv[++i];
    const int number = std::atoi(value);
    if (flag == "--batches") {
      o.batches = ParseList(value);
    } else if (flag == "--heads" && number > 0) {
      o.heads = number;
    } else if (flag == "--head-dim" && (number == 64 || number == 128)) {
      o.head_dim = number;
    } else if (flag == "--conv" && number >= 1 && number <= kMaxConvSize) {
      o.conv = number;
    } else if (flag == "--iterations" && number >= 2) {
      o.iterations = number;
    } else if (flag == "--reps" && number > 0) {
      o.reps = number;
    } else if (flag == "--prefill-batch" && number >= 0) {
      o.prefill_batch = number;
    } else if (flag == "--prefill-tokens" && number > 0) {
      o.prefill_tokens = number;
    } else if (flag == "--sm-count" && number > 0) {
      o.sm_count = number;
    } else if (flag == "--layers" && number > 0) {
      o.layers = number;
    } else if (flag == "--timeline" && *value != '\0') {
      o.timeline_dir = value;
    } else {
      std::fprintf(stderr, "mesa_kernel_bench: bad flag or value: %s %s\n", flag.c_str(), value);
      return 2;
    }
  }
  if (QueryCudaDevices().empty()) {
    std::fprintf(stderr, "mesa_kernel_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "device properties");
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::mt19937 rng(7);
  const int sm_count = o.sm_count > 0 ? o.sm_count : prop.multiProcessorCount;
  BenchDecode(o, sm_count, rng);
  if (o.prefill_batch > 0) BenchPrefill(o, sm_count, rng);
  return 0;
}

}  // namespace
}  // namespace ridge::cuda

int main(int argc, char** argv) { return ridge::cuda::Main(argc, argv); }
