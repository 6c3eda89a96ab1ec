// GPU throughput of the CUDA backend on random weights (like vLLM's dummy load format): decode
// tok/s per batch size and solver tolerance, with the bytes a decode step must move against the
// device's measured copy ceiling, and prefill tok/s. Prints one line per measurement.
//
//   cuda_bench --config tools/bench/configs/mesanet-140m.json [--prompt 512] [--decode-steps 64]
//              [--batches 1,16,64,256 | none] [--tolerances 0,1e-3,1e-4] [--max-iterations 30]
//              [--prefill-batch 8] [--prefill-len 2048 | --prefill-lens 8,16,32]
//              [--chunked-min N (default: the backend's)] [--no-graphs] [--sample]
//              [--single-pass-residual R (default: the backend's; 0: 3xTF32 throughout)]
//              [--engine-load 16,64 [--engine-requests 512] [--engine-prompt 128]
//               [--engine-new-tokens 64] [--prefill-budget N]]
//
// --engine-load runs a closed-loop load through the engine in process (tools/bench/engine_load.h)
// at each number of clients: what the server sustains before HTTP.
//
// Decode picks tokens greedily on the GPU; --sample picks them by sampling on the GPU instead
// (temperature 1, top-k 50, top-p 0.95, repetition penalty 1.1: a typical chat request).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "models/checkpoint.h"
#include "models/cuda/cuda_backend.h"
#include "models/cuda/device_memory.h"
#include "sampling/sampler.h"
#include "server/cli_args.h"
#include "tools/bench/engine_load.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<int32_t> Prompt(int64_t length, int64_t seed, int64_t vocab) {
  std::vector<int32_t> ids(length);
  for (int64_t t = 0; t < length; ++t)
    ids[t] = static_cast<int32_t>((t * 7919 + seed * 104729) % vocab);
  return ids;
}

double RelativeRms(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += double(a[i] - ref[i]) * (a[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Setup {
  CudaBackend* backend;
  int64_t prompt, decode_steps;
  int32_t max_iterations;
  double copy_ceiling;  // bytes/s, read + written
  bool sample;          // decode by sampling on the device, not greedily
};

SamplingParams ChatSampling() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 50;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.1f;
  p.seed = 7;
  return p;
}

// Prefills `batch` sequences (tolerance 0), then runs greedy decode steps at `tol`.
absl::Status BenchDecode(const Setup& s, int64_t batch, double tol,
                         std::vector<float>* reference_logits) {
  CudaBackend& b = *s.backend;
  const MesaNetConfig& config = b.config();
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < batch; ++i) prompts.push_back(Prompt(s.prompt, i, config.vocab_size));
  std::vector<SlotChunk> chunks(batch);
  for (int64_t i = 0; i < batch; ++i) {
    RETURN_IF_ERROR(b.ResetSlot(i));
    chunks[i] = {i, prompts[i], {0.0f, s.max_iterations}, nullptr, SolvePhase::kPrefill};
  }
  std::vector<int32_t> next;
  RETURN_IF_ERROR(b.ForwardGreedy(chunks, &next));

  // First decode step with logits: the difference a tolerance makes against tolerance 0.
  std::vector<SolverStats> stats(batch);
  for (int64_t i = 0; i < batch; ++i) {
    chunks[i] = {i,
                 {&next[i], 1},
                 {static_cast<float>(tol), s.max_iterations},
                 &stats[i],
                 SolvePhase::kDecode};
  }
  std::vector<float> logits;
  RETURN_IF_ERROR(b.Forward(chunks, LogitsFor::kLastToken, &logits));
  double logit_diff = 0.0;
  if (tol == 0.0) {
    *reference_logits = logits;
  } else if (reference_logits->size() == logits.size()) {
    logit_diff = RelativeRms(logits, *reference_logits);
  }
  for (int64_t i = 0; i < batch; ++i) {
    const float* row = logits.data() + i * config.vocab_size;
    next[i] = static_cast<int32_t>(std::max_element(row, row + config.vocab_size) - row);
  }

  std::vector<int32_t> tokens = next;
  std::vector<Sampler> samplers;
  std::vector<std::vector<int32_t>> generated(batch);
  if (s.sample) {
    for (int64_t i = 0; i < batch; ++i) {
      ASSIGN_OR_RETURN(Sampler sampler,
                       Sampler::Create(ChatSampling(), static_cast<int32_t>(config.vocab_size)));
      samplers.push_back(std::move(sampler));
    }
  }
  std::vector<TokenPick> picks(batch);
  std::vector<PickedToken> picked;
  auto step = [&]() -> absl::Status {
    for (int64_t i = 0; i < batch; ++i) {
      chunks[i] = {i,
                   {&tokens[i], 1},
                   {static_cast<float>(tol), s.max_iterations},
                   &stats[i],
                   SolvePhase::kDecode};
      if (s.sample) {
        picks[i] = {&samplers[i], samplers[i].NextDrawUniform(), prompts[i], generated[i]};
      }
    }
    if (s.sample) {
      RETURN_IF_ERROR(b.ForwardSample(chunks, picks, &picked));
      for (int64_t i = 0; i < batch; ++i) {
        tokens[i] = picked[i].token;
        generated[i].push_back(tokens[i]);
      }
    } else {
      RETURN_IF_ERROR(b.ForwardGreedy(chunks, &next));
      tokens = next;
    }
    return absl::OkStatus();
  };
  for (int w = 0; w < 3; ++w) RETURN_IF_ERROR(step());  // capture the graph, warm up
  for (auto& st : stats) st = SolverStats();
  std::vector<double> step_seconds;
  for (int64_t n = 0; n < s.decode_steps; ++n) {
    const auto start = Clock::now();
    RETURN_IF_ERROR(step());
    step_seconds.push_back(SecondsSince(start));
  }
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median = step_seconds[step_seconds.size() / 2];
  double total = 0;
  for (double x : step_seconds) total += x;
  const double mean = total / step_seconds.size();
  SolverStats all;
  for (const auto& st : stats) all.Merge(st);
  const double bytes = double(b.weight_bytes()) + 2.0 * batch * double(b.state_bytes_per_slot());
  std::printf(
      "decode%s batch %-4lld tol %-6.0e step_median_ms %8.3f step_mean_ms %8.3f tok/s %10.0f "
      "bytes/step %8.1f MB  achieved %6.2f TB/s  of_ceiling %5.1f%%  byte_limit_ms %7.3f  "
      "mean_iters %5.2f  capped %5.1f%%  logit_rel_rms_vs_tol0 %.2e\n",
      s.sample ? "(sampled)" : "", static_cast<long long>(batch), tol, 1e3 * median, 1e3 * mean,
      batch / median, bytes / 1e6, bytes / median / 1e12, 100.0 * bytes / median / s.copy_ceiling,
      1e3 * bytes / s.copy_ceiling, all.MeanIterations(), 100.0 * all.CappedFraction(), logit_diff);
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status BenchPrefill(const Setup& s, int64_t batch, int64_t length, double tol) {
  CudaBackend& b = *s.backend;
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < batch; ++i)
    prompts.push_back(Prompt(length, i + 17, b.config().vocab_size));
  std::vector<SolverStats> stats(batch);
  std::vector<SlotChunk> chunks(batch);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {  // the first run includes allocation of step buffers
    for (int64_t i = 0; i < batch; ++i) {
      RETURN_IF_ERROR(b.ResetSlot(i));
      stats[i] = SolverStats();
      chunks[i] = {i,
                   prompts[i],
                   {static_cast<float>(tol), s.max_iterations},
                   &stats[i],
                   SolvePhase::kPrefill};
    }
    std::vector<int32_t> next;
    const auto start = Clock::now();
    RETURN_IF_ERROR(b.ForwardGreedy(chunks, &next));
    best = std::min(best, SecondsSince(start));
  }
  SolverStats all;
  for (const auto& st : stats) all.Merge(st);
  std::printf("prefill batch %lld x %lld tol %-6.0e seconds %.4f tok/s %10.0f mean_iters %5.2f\n",
              static_cast<long long>(batch), static_cast<long long>(length), tol, best,
              batch * length / best, all.MeanIterations());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Bench(int argc, char** argv) {
  ASSIGN_OR_RETURN(
      const CliArgs args,
      CliArgs::Parse(argc, argv,
                     {"config", "prompt", "decode-steps", "batches", "tolerances", "max-iterations",
                      "prefill-batch", "prefill-len", "prefill-tolerances", "no-graphs", "sample",
                      "engine-load", "engine-requests", "engine-prompt", "engine-new-tokens",
                      "prefill-budget", "prefill-lens", "chunked-min", "single-pass-residual"},
                     {"no-graphs", "sample"}));
  ASSIGN_OR_RETURN(const std::string config_path, args.String("config"));
  ASSIGN_OR_RETURN(const nlohmann::json json, ReadJsonFile(config_path));
  ASSIGN_OR_RETURN(const MesaNetConfig config, ParseMesaNetConfig(json));
  ASSIGN_OR_RETURN(const int64_t prompt, args.Int("prompt", 512));
  ASSIGN_OR_RETURN(const int64_t decode_steps, args.Int("decode-steps", 64));
  ASSIGN_OR_RETURN(const int64_t max_iterations, args.Int("max-iterations", 30));
  ASSIGN_OR_RETURN(const int64_t prefill_batch, args.Int("prefill-batch", 8));
  ASSIGN_OR_RETURN(const int64_t prefill_len, args.Int("prefill-len", 2048));
  // --batches none skips the decode measurements (a prefill-only run, e.g. under a profiler).
  std::vector<double> batches;
  if (args.StringOr("batches", "") != "none") {
    ASSIGN_OR_RETURN(batches, args.NumberList("batches", "1,16,64,256"));
  }
  ASSIGN_OR_RETURN(const auto tolerances, args.NumberList("tolerances", "0,1e-3,1e-4"));
  ASSIGN_OR_RETURN(const auto prefill_tols, args.NumberList("prefill-tolerances", "0"));
  ASSIGN_OR_RETURN(const auto prefill_lens,
                   args.NumberList("prefill-lens", std::to_string(prefill_len)));
  ASSIGN_OR_RETURN(const int64_t chunked_min,
                   args.Int("chunked-min", CudaBackendOptions{}.chunked_prefill_min_tokens));
  ASSIGN_OR_RETURN(
      const double single_pass,
      args.Double("single-pass-residual", CudaBackendOptions{}.prefill_single_pass_residual));
  for (double len : prefill_lens) {
    if (!(len >= 1 && len <= (1 << 20)) || len != static_cast<int64_t>(len)) {
      return absl::InvalidArgumentError("--prefill-lens must be whole numbers from 1 to 2^20");
    }
  }
  if (chunked_min < 1) return absl::InvalidArgumentError("--chunked-min must be >= 1");
  for (double b : batches) {
    if (!(b >= 1 && b <= 4096) || b != static_cast<int64_t>(b)) {
      return absl::InvalidArgumentError("--batches must be whole numbers from 1 to 4096");
    }
  }
  for (const auto* list : {&tolerances, &prefill_tols}) {
    for (double t : *list) {
      if (!(t >= 0 && t <= 1)) return absl::InvalidArgumentError("tolerances must be in [0, 1]");
    }
  }
  if (prompt < 1 || decode_steps < 1 || prefill_batch < 0 || prefill_len < 1) {
    return absl::InvalidArgumentError("--prompt, --decode-steps and --prefill-len must be >= 1");
  }

  std::vector<int64_t> engine_load;
  if (args.Has("engine-load")) {
    ASSIGN_OR_RETURN(const auto list, args.NumberList("engine-load", ""));
    ASSIGN_OR_RETURN(engine_load, EngineLoadClients(list));
  }
  EngineLoadOptions load;
  ASSIGN_OR_RETURN(load.requests, args.Int("engine-requests", 512));
  ASSIGN_OR_RETURN(load.prompt_tokens, args.Int("engine-prompt", 128));
  ASSIGN_OR_RETURN(const int64_t new_tokens, args.Int("engine-new-tokens", 64));
  ASSIGN_OR_RETURN(load.prefill_token_budget, args.Int("prefill-budget", 0));
  if (new_tokens < 1 || new_tokens > (1 << 20) || load.prefill_token_budget < 0) {
    return absl::InvalidArgumentError("--engine-new-tokens must be >= 1, --prefill-budget >= 0");
  }
  load.new_tokens = static_cast<int32_t>(new_tokens);
  load.prompt_id_limit = static_cast<int32_t>(std::min<int64_t>(4096, config.vocab_size));

  int64_t slots = prefill_batch;
  for (double b : batches) slots = std::max(slots, static_cast<int64_t>(b));
  for (int64_t c : engine_load) slots = std::max(slots, c);
  const auto load_start = Clock::now();
  const MesaNetWeights weights = RandomMesaNetWeights(config, 1234);
  ASSIGN_OR_RETURN(auto backend, CudaBackend::Create(config, weights,
                                                     {.num_slots = slots,
                                                      .use_graphs = !args.Has("no-graphs"),
                                                      .chunked_prefill_min_tokens = chunked_min,
                                                      .prefill_single_pass_residual =
                                                          static_cast<float>(single_pass)}));
  ASSIGN_OR_RETURN(const double ceiling, cuda::MeasureDeviceCopyBandwidth(2ll << 30));
  std::printf(
      "config %s: %lld parameters, %.1f MB of weights on the GPU, state %.2f MiB/sequence, "
      "%lld slots, graphs %s, set-up %.1f s\n",
      config_path.c_str(), static_cast<long long>(config.ParameterCount()),
      backend->weight_bytes() / 1e6, backend->state_bytes_per_slot() / 1048576.0,
      static_cast<long long>(slots), args.Has("no-graphs") ? "off" : "on",
      SecondsSince(load_start));
  std::printf("device copy ceiling (read + write, 2 GiB cudaMemcpy D2D): %.3f TB/s\n",
              ceiling / 1e12);
  const Setup setup{backend.get(), prompt,
                    decode_steps,  static_cast<int32_t>(max_iterations),
                    ceiling,       args.Has("sample")};
  for (double batch : batches) {
    std::vector<float> reference;
    for (double tol : tolerances) {
      RETURN_IF_ERROR(BenchDecode(setup, static_cast<int64_t>(batch), tol, &reference));
    }
  }
  if (prefill_batch > 0) {
    for (double len : prefill_lens) {
      for (double tol : prefill_tols) {
        RETURN_IF_ERROR(BenchPrefill(setup, prefill_batch, static_cast<int64_t>(len), tol));
      }
    }
  }
  for (int64_t c : engine_load) {
    load.concurrency = c;
    RETURN_IF_ERROR(ReportEngineLoad(backend.get(), load));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ridge

int main(int argc, char** argv) {
  const absl::Status status = ridge::Bench(argc - 1, argv + 1);
  if (!status.ok()) {
    std::fprintf(stderr, "cuda_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
