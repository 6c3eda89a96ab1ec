// GPU throughput of the CUDA hybrid backend (hybrid_qwen3) on random weights in the shape of a
// config (like vLLM's dummy load format): the time to first token of one long prompt, prefill
// tok/s of a batch of long prompts, and pure decode tok/s at long contexts with as many
// sequences as fit, per iteration cap and tolerance, with the bytes a decode step must move
// (weights, every sequence's KV and recurrent state) against the device's copy ceiling measured
// in the same run.
//
//   cuda_hybrid_bench --config tools/bench/configs/hqwen3-8b-gka.json [--contexts 16384,32768]
//       [--max-batch 0 (as many as fit; a list runs each)] [--iterations 30,10]
//       [--tolerances 0,1e-3] [--decode-steps 8] [--ttft 14336] [--prefill-batch 8]
//       [--prefill-len 16384] [--chunk 2048] [--gpu-memory-utilization 0.92]
//       [--kv-cache-dtype bf16|fp8] [--graphs 1 (0: launch every decode step)]
//       [--gka-prefill-tensor-cores 1 (0: the chunked GKA prefill's state products on the CUDA
//       cores)]
//       [--tensor-parallel-size 1 (N: the model split over N ranks, rank r on GPU r modulo the
//        GPUs present, NCCL when each has its own)]
//       [--score-len 0 (L: prompt logprobs of --prefill-batch L-token prompts against their
//        plain prefill, in the engine's pieces)]
//       [--picks greedy (a list of: greedy; sampled, every sequence at temperature 0.8 on the
//        device; host-row, the same with one sequence's pick on the host (a logit bias);
//        host-all, every sequence sampled on the host from copied logits, ModelBackend's way)]
//
// Decode at context L: one real L-token prefill, its recurrent state copied into every slot;
// their KV blocks (distinct per sequence) hold zeros, as the kernels' bytes and work do not
// depend on the values. --prefill-len 0 or --ttft 0 skips those parts.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "models/arch/load_model.h"
#include "models/cuda/device_memory.h"
#include "models/cuda/hybrid_backend.h"
#include "models/cuda/tensor_parallel_cuda_backend.h"
#include "sampling/sampler.h"
#include "server/cli_args.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int32_t TokenAt(int64_t t, int64_t seed, int64_t vocab) {
  return static_cast<int32_t>((t * 7919 + seed * 104729 + 11) % vocab);
}

// The KV blocks of sequence s: blocks [s * per_sequence, (s + 1) * per_sequence).
std::vector<int32_t> BlockTable(int64_t s, int64_t per_sequence) {
  std::vector<int32_t> table(per_sequence);
  for (int64_t i = 0; i < per_sequence; ++i) table[i] = static_cast<int32_t>(s * per_sequence + i);
  return table;
}

// Prefills `count` sequences (slots first..first+count) of `length` tokens in pieces of `chunk`,
// all of them in every step; returns the seconds. With score_top >= 0 every prompt token after
// the first is scored as for prompt logprobs (the token's log-probability and score_top
// alternatives), as the engine asks it.
absl::StatusOr<double> Prefill(ModelBackend& b, int64_t first, int64_t count, int64_t length,
                               int64_t chunk, const std::vector<std::vector<int32_t>>& tables,
                               int32_t max_iterations, int32_t score_top = -1) {
  std::vector<std::vector<int32_t>> prompts(count);
  for (int64_t s = 0; s < count; ++s) {
    RETURN_IF_ERROR(b.ResetSlot(first + s));
    for (int64_t t = 0; t < length; ++t) prompts[s].push_back(TokenAt(t, s, b.spec().vocab_size));
  }
  const auto start = Clock::now();
  std::vector<int32_t> next;
  std::vector<PickedToken> picked;
  for (int64_t at = 0; at < length; at += chunk) {
    const int64_t n = std::min(chunk, length - at);
    std::vector<SlotChunk> chunks;
    std::vector<TokenPick> picks(count);
    for (int64_t s = 0; s < count; ++s) {
      chunks.push_back({.slot = first + s,
                        .tokens = std::span<const int32_t>(prompts[s]).subspan(at, n),
                        .solver = {0.0f, max_iterations},
                        .phase = SolvePhase::kPrefill,
                        .kv_blocks = tables[first + s]});
      picks[s].score_next =
          std::span<const int32_t>(prompts[s]).subspan(at + 1, std::min(n, length - 1 - at));
      picks[s].score_top_logprobs = score_top;
    }
    if (score_top < 0) {
      RETURN_IF_ERROR(b.ForwardGreedy(chunks, &next));
    } else {
      RETURN_IF_ERROR(b.ForwardSample(chunks, picks, &picked));
    }
  }
  return SecondsSince(start);
}

// How a decode step picks its tokens (--picks).
enum class Picks { kGreedy, kSampled, kHostRow, kHostAll };

constexpr std::pair<const char*, Picks> kPickNames[] = {{"greedy", Picks::kGreedy},
                                                        {"sampled", Picks::kSampled},
                                                        {"host-row", Picks::kHostRow},
                                                        {"host-all", Picks::kHostAll}};

absl::StatusOr<Picks> ParsePicks(const std::string& name) {
  for (const auto& [known, mode] : kPickNames) {
    if (name == known) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--picks: unknown \"", name, "\" (greedy, sampled, host-row, host-all)"));
}

const char* PicksName(Picks mode) {
  for (const auto& [name, known] : kPickNames) {
    if (mode == known) return name;
  }
  return "";
}

// One step's picks: the greedy argmax, or token picks by samplers at temperature 0.8 (the first
// with a logit bias for host-row), on the device or (host-all) all on the host.
absl::Status PickTokens(ModelBackend& b, Picks mode, std::span<const SlotChunk> chunks,
                        std::vector<std::unique_ptr<Sampler>>& samplers) {
  if (mode == Picks::kGreedy) {
    std::vector<int32_t> next;
    return b.ForwardGreedy(chunks, &next);
  }
  const int32_t vocab = static_cast<int32_t>(b.spec().vocab_size);
  if (samplers.size() != chunks.size()) {
    samplers.clear();
    for (size_t i = 0; i < chunks.size(); ++i) {
      SamplingParams params;
      params.temperature = 0.8f;
      params.seed = static_cast<uint64_t>(i);
      if (i == 0 && mode == Picks::kHostRow) params.logit_bias = {{0, 0.5f}};
      ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(params, vocab));
      samplers.push_back(std::make_unique<Sampler>(std::move(sampler)));
    }
  }
  std::vector<TokenPick> picks(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    picks[i].sampler = samplers[i].get();
    picks[i].uniform = samplers[i]->NextDrawUniform();
  }
  std::vector<PickedToken> picked;
  return mode == Picks::kHostAll ? b.ModelBackend::ForwardSample(chunks, picks, &picked)
                                 : b.ForwardSample(chunks, picks, &picked);
}

struct DecodeRun {
  int64_t context = 0, batch = 0;
  int32_t max_iterations = 0;
  float tolerance = 0.0f;
  int64_t steps = 0, template_slot = 0;
  double copy_ceiling = 0.0;  // bytes/s
  int64_t weight_bytes = 0;   // over every rank
  // The GPUs the ranks run on, and the share of every byte the busiest of them moves.
  int64_t gpus = 1;
  double busiest_gpu_share = 1.0;
  Picks picks = Picks::kGreedy;
};

// Pure decode of run.batch sequences, each starting from the template slot's state at
// run.context: two warm-up steps, then run.steps timed ones; prints one line.
absl::Status MeasureDecode(ModelBackend& b, const DecodeRun& run,
                           const std::vector<std::vector<int32_t>>& tables) {
  const ModelSpec& spec = b.spec();
  for (int64_t s = 0; s < run.batch; ++s) RETURN_IF_ERROR(b.CopySlot(run.template_slot, s));
  std::vector<int32_t> tokens(run.batch);
  std::vector<SolverStats> stats(run.batch);
  std::vector<std::unique_ptr<Sampler>> samplers;
  double seconds = 0;
  for (int64_t step = 0; step < run.steps + 2; ++step) {
    std::vector<SlotChunk> chunks;
    for (int64_t s = 0; s < run.batch; ++s) {
      tokens[s] = TokenAt(run.context + step, s, spec.vocab_size);
      chunks.push_back({.slot = s,
                        .tokens = std::span<const int32_t>(&tokens[s], 1),
                        .solver = {run.tolerance, run.max_iterations},
                        .stats = step >= 2 ? &stats[s] : nullptr,
                        .phase = SolvePhase::kDecode,
                        .kv_blocks = tables[s]});
    }
    const auto start = Clock::now();
    RETURN_IF_ERROR(PickTokens(b, run.picks, chunks, samplers));
    if (step >= 2) seconds += SecondsSince(start);  // two warm-up steps
  }
  SolverStats all;
  for (const SolverStats& s : stats) all.Merge(s);
  const double step_s = seconds / run.steps;
  const double batch = static_cast<double>(run.batch);
  // Every rank's weights, KV and state; the busiest GPU moves its share of them.
  const double bytes = static_cast<double>(run.weight_bytes) +
                       batch * (static_cast<double>(run.context) * b.kv_layout().bytes_per_token() +
                                2.0 * b.state_bytes_per_slot());
  const double gpu_bytes = bytes * run.busiest_gpu_share;
  const double limit_tok_s = batch / (gpu_bytes / run.copy_ceiling);
  std::printf(
      "decode context %6lld batch %4lld num_iter %2d tol %-6.0e step %7.2f ms  %8.0f tok/s  "
      "(%.0f a GPU)  mean_iters %5.2f  bytes/step %.2f GB (busiest GPU %.2f GB, %.2f TB/s)  "
      "byte limit %.0f tok/s (%.0f%%)%s%s\n",
      static_cast<long long>(run.context), static_cast<long long>(run.batch), run.max_iterations,
      static_cast<double>(run.tolerance), step_s * 1e3, batch / step_s,
      batch / step_s / static_cast<double>(run.gpus), all.MeanIterations(), bytes / 1e9,
      gpu_bytes / 1e9, gpu_bytes / step_s / 1e12, limit_tok_s,
      100.0 * (batch / step_s) / limit_tok_s, run.picks == Picks::kGreedy ? "" : "  picks ",
      run.picks == Picks::kGreedy ? "" : PicksName(run.picks));
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Bench(int argc, char** argv) {
  ASSIGN_OR_RETURN(
      const CliArgs args,
      CliArgs::Parse(
          argc, argv,
          {"config", "contexts", "max-batch", "iterations", "tolerances", "decode-steps", "ttft",
           "prefill-batch", "prefill-len", "chunk", "gpu-memory-utilization", "kv-cache-dtype",
           "graphs", "tensor-parallel-size", "gka-prefill-tensor-cores", "picks", "score-len"}));
  ASSIGN_OR_RETURN(const std::string config_path, args.String("config"));
  ASSIGN_OR_RETURN(const auto contexts, args.NumberList("contexts", "16384,32768"));
  ASSIGN_OR_RETURN(const auto max_batches, args.NumberList("max-batch", "0"));
  ASSIGN_OR_RETURN(const int64_t use_graphs, args.Int("graphs", 1));
  ASSIGN_OR_RETURN(const auto iteration_caps, args.NumberList("iterations", "30,10"));
  ASSIGN_OR_RETURN(const auto tolerances, args.NumberList("tolerances", "0,1e-3"));
  std::vector<Picks> pick_modes;
  const std::vector<std::string> pick_names = absl::StrSplit(args.StringOr("picks", "greedy"), ',');
  for (const std::string& name : pick_names) {
    ASSIGN_OR_RETURN(const Picks mode, ParsePicks(name));
    pick_modes.push_back(mode);
  }
  ASSIGN_OR_RETURN(const int64_t steps, args.Int("decode-steps", 8));
  ASSIGN_OR_RETURN(const int64_t ttft_len, args.Int("ttft", 14336));
  ASSIGN_OR_RETURN(const int64_t prefill_batch, args.Int("prefill-batch", 8));
  ASSIGN_OR_RETURN(const int64_t prefill_len, args.Int("prefill-len", 16384));
  ASSIGN_OR_RETURN(const int64_t chunk, args.Int("chunk", 2048));
  ASSIGN_OR_RETURN(const int64_t score_len, args.Int("score-len", 0));
  ASSIGN_OR_RETURN(const double utilization, args.Double("gpu-memory-utilization", 0.92));
  ASSIGN_OR_RETURN(const int64_t ranks, args.Int("tensor-parallel-size", 1));
  ASSIGN_OR_RETURN(const int64_t prefill_tensor_cores, args.Int("gka-prefill-tensor-cores", 1));
  if (ranks < 1 || ranks > 64) {
    return absl::InvalidArgumentError("--tensor-parallel-size must be in [1, 64]");
  }
  const std::string kv_dtype_name = args.StringOr("kv-cache-dtype", "bf16");
  if (kv_dtype_name != "bf16" && kv_dtype_name != "fp8") {
    return absl::InvalidArgumentError("--kv-cache-dtype must be bf16 or fp8");
  }
  const KvCacheDtype kv_dtype =
      kv_dtype_name == "fp8" ? KvCacheDtype::kFp8E4m3 : KvCacheDtype::kBf16;

  // The GPUs first: the random weights of a large config take tens of GB of host memory.
  size_t free_bytes = 0, total_bytes = 0;
  int device_count = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess ||
      cudaGetDeviceCount(&device_count) != cudaSuccess || device_count < 1) {
    return absl::FailedPreconditionError("no CUDA device");
  }
  // Ranks go round the GPUs; the busiest GPU holds ranks_per_gpu of the N shares.
  const int64_t gpus = std::min<int64_t>(ranks, device_count);
  const int64_t ranks_per_gpu = (ranks + gpus - 1) / gpus;
  const double busiest_gpu_share = static_cast<double>(ranks_per_gpu) / static_cast<double>(ranks);
  ASSIGN_OR_RETURN(const std::unique_ptr<Model> model,
                   LoadModel(config_path, LoadFormat::kRandom, 16, 1234));
  const ModelSpec& spec = model->spec();
  if (model->hybrid_weights() == nullptr) {
    return absl::InvalidArgumentError("--config must describe a hybrid_qwen3 model");
  }
  int64_t max_context = std::max({ttft_len, prefill_len, score_len});
  for (double c : contexts) max_context = std::max(max_context, static_cast<int64_t>(c));
  // Slots: as many sequences of the longest context as the memory holds (estimated from the
  // parameter count), plus the template's.
  const KvLayout planned_kv = PlanDeviceKvLayout(spec, 16, kv_dtype);
  const double per_sequence_bytes =
      static_cast<double>(PlanDeviceRecurrentLayout(spec).bytes_per_slot()) +
      static_cast<double>(max_context) * static_cast<double>(planned_kv.bytes_per_token());
  const double pool_bytes = utilization * static_cast<double>(total_bytes) -
                            2.0 * static_cast<double>(spec.ParameterCount()) * busiest_gpu_share -
                            (4.0 * (1 << 30));
  const int64_t slots = std::clamp<int64_t>(
      static_cast<int64_t>(pool_bytes / (per_sequence_bytes * busiest_gpu_share)) + 1, 2, 1024);
  const auto created = Clock::now();
  CudaHybridOptions options;
  options.num_slots = slots;
  options.num_kv_blocks = 0;
  options.kv_block_size = 16;
  options.kv_cache_dtype = kv_dtype;
  options.gpu_memory_utilization = utilization;
  options.use_graphs = use_graphs != 0;
  options.gka_prefill_tensor_cores = prefill_tensor_cores != 0;
  std::unique_ptr<ModelBackend> backend;
  int64_t weight_bytes = 0;
  int64_t (*graph_replays)(const ModelBackend&) = nullptr;
  std::string collectives = "none (one rank)";
  if (ranks == 1) {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaHybridBackend> whole,
                     CudaHybridBackend::Create(spec, *model->hybrid_weights(), options));
    weight_bytes = whole->weight_bytes();
    graph_replays = [](const ModelBackend& b) {
      return static_cast<const CudaHybridBackend&>(b).graph_replays();
    };
    backend = std::move(whole);
  } else {
    TensorParallelCudaOptions split;
    split.ranks = static_cast<int32_t>(ranks);
    split.devices.clear();
    for (int64_t g = 0; g < gpus; ++g) split.devices.push_back(static_cast<int>(g));
    split.backend = options;
    ASSIGN_OR_RETURN(std::unique_ptr<TensorParallelCudaBackend> group,
                     TensorParallelCudaBackend::Create(spec, *model->hybrid_weights(), split));
    weight_bytes = group->weight_bytes();
    collectives = group->collectives();
    graph_replays = [](const ModelBackend& b) {
      return static_cast<const TensorParallelCudaBackend&>(b).graph_replays();
    };
    backend = std::move(group);
  }
  ModelBackend& b = *backend;
  const KvLayout& kv = b.kv_layout();
  ASSIGN_OR_RETURN(const double ceiling, cuda::MeasureDeviceCopyBandwidth(2ll << 30));
  std::printf(
      "config %s: %s, %lld parameters, %lld bytes of bf16 weights (uploaded in %.1f s); %lld "
      "slots of %lld state bytes, %lld KV blocks of %lld tokens (%lld bytes/token); copy ceiling "
      "%.3f TB/s; %lld rank(s) on %lld GPU(s), collectives: %s\n",
      config_path.c_str(), spec.LayerPattern().c_str(),
      static_cast<long long>(spec.ParameterCount()), static_cast<long long>(weight_bytes),
      SecondsSince(created), static_cast<long long>(b.num_slots()),
      static_cast<long long>(b.state_bytes_per_slot()), static_cast<long long>(b.num_kv_blocks()),
      static_cast<long long>(kv.block_size), static_cast<long long>(kv.bytes_per_token()),
      ceiling / 1e12, static_cast<long long>(ranks), static_cast<long long>(gpus),
      collectives.c_str());
  std::fflush(stdout);

  // Every slot gets its own blocks, enough for the longest context (the slots past what fits
  // share nothing and are not used).
  const int64_t per_sequence = kv.BlocksFor(max_context + steps + 2);
  // The last slot keeps each context's template state.
  const int64_t template_slot = b.num_slots() - 1;
  const int64_t fit = std::min<int64_t>(template_slot, b.num_kv_blocks() / per_sequence);
  if (fit < 1) return absl::ResourceExhaustedError("not even one sequence fits");
  std::vector<std::vector<int32_t>> tables;
  for (int64_t s = 0; s < fit; ++s) tables.push_back(BlockTable(s, per_sequence));
  const int32_t default_cap = DefaultSolverIterations(spec);

  if (ttft_len > 0) {
    ASSIGN_OR_RETURN(const double seconds, Prefill(b, 0, 1, ttft_len, chunk, tables, default_cap));
    std::printf("ttft prompt %lld: %.3f s (%.0f tok/s, chunks of %lld)\n",
                static_cast<long long>(ttft_len), seconds, ttft_len / seconds,
                static_cast<long long>(chunk));
    std::fflush(stdout);
  }
  if (prefill_len > 0 && prefill_batch > 0) {
    const int64_t count = std::min(prefill_batch, fit);
    ASSIGN_OR_RETURN(const double seconds,
                     Prefill(b, 0, count, prefill_len, std::max<int64_t>(1, chunk / count), tables,
                             default_cap));
    std::printf("prefill %lld x %lld: %.3f s, %.0f tok/s\n", static_cast<long long>(count),
                static_cast<long long>(prefill_len), seconds, count * prefill_len / seconds);
    std::fflush(stdout);
  }
  if (score_len > 0 && prefill_batch > 0) {
    // Prompt logprobs as the engine computes them: at most MaxScoredRowsPerStep rows a step, the
    // same pieces prefilled plainly for comparison.
    const int64_t count = std::min(prefill_batch, fit);
    const int64_t piece = std::max<int64_t>(1, MaxScoredRowsPerStep(b.spec().vocab_size) / count);
    ASSIGN_OR_RETURN(const double plain,
                     Prefill(b, 0, count, score_len, piece, tables, default_cap));
    ASSIGN_OR_RETURN(const double scored,
                     Prefill(b, 0, count, score_len, piece, tables, default_cap, 5));
    std::printf(
        "prompt scoring %lld x %lld (pieces of %lld, 5 alternatives): %.0f tok/s scored, "
        "%.0f tok/s prefilled alone (%.2fx the time)\n",
        static_cast<long long>(count), static_cast<long long>(score_len),
        static_cast<long long>(piece), count * score_len / scored, count * score_len / plain,
        scored / plain);
    std::fflush(stdout);
  }

  for (double context_value : contexts) {
    const int64_t context = static_cast<int64_t>(context_value);
    ASSIGN_OR_RETURN(const double template_seconds,
                     Prefill(b, 0, 1, context, chunk, tables, default_cap));
    RETURN_IF_ERROR(b.CopySlot(0, template_slot));
    std::printf("context %lld: template prefill %.2f s; as many as fit: %lld\n",
                static_cast<long long>(context), template_seconds, static_cast<long long>(fit));
    std::fflush(stdout);
    for (double batch_value : max_batches) {
      const int64_t batch =
          batch_value > 0 ? std::min(static_cast<int64_t>(batch_value), fit) : fit;
      for (double cap_value : iteration_caps) {
        for (double tol : tolerances) {
          for (const Picks picks : pick_modes) {
            RETURN_IF_ERROR(MeasureDecode(b,
                                          {.context = context,
                                           .batch = batch,
                                           .max_iterations = static_cast<int32_t>(cap_value),
                                           .tolerance = static_cast<float>(tol),
                                           .steps = steps,
                                           .template_slot = template_slot,
                                           .copy_ceiling = ceiling,
                                           .weight_bytes = weight_bytes,
                                           .gpus = gpus,
                                           .busiest_gpu_share = busiest_gpu_share,
                                           .picks = picks},
                                          tables));
          }
        }
      }
    }
  }
  std::printf("decode steps replayed from CUDA graphs: %lld\n",
              static_cast<long long>(graph_replays(b)));
  return absl::OkStatus();
}

}  // namespace
}  // namespace ridge

int main(int argc, char** argv) {
  const absl::Status status = ridge::Bench(argc - 1, argv + 1);
  if (!status.ok()) {
    std::fprintf(stderr, "cuda_hybrid_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
