// CPU throughput of the engine on random weights of any architecture's config (MesaNet,
// hybrid_qwen3): prefill tok/s and decode tok/s at several batch sizes and solver tolerances,
// and the memory one sequence takes at 1K and 8K tokens of context. Prints one line per
// measurement.
//
//   cpu_bench --config tools/bench/configs/mesanet-20m.json [--prompt 512] [--new-tokens 64]
//             [--batches 1,8] [--tolerances 0,1e-3,1e-4] [--threads 2]
//             [--engine-load 1,4 [--engine-requests 64]]  (closed-loop engine load, see
//             tools/bench/engine_load.h; prompts of --prompt tokens, --new-tokens each)
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "engine/offline_generation.h"
#include "kernels/threading.h"
#include "models/arch/load_model.h"
#include "models/cpu_backend.h"
#include "server/cli_args.h"
#include "tools/bench/engine_load.h"

namespace ridge {
namespace {

absl::Status Bench(int argc, char** argv) {
  ASSIGN_OR_RETURN(const CliArgs args,
                   CliArgs::Parse(argc, argv,
                                  {"config", "prompt", "new-tokens", "batches", "tolerances",
                                   "threads", "seed", "engine-load", "engine-requests"}));
  ASSIGN_OR_RETURN(const std::string config_path, args.String("config"));
  ASSIGN_OR_RETURN(const int64_t seed, args.Int("seed", 1234));
  ASSIGN_OR_RETURN(const int64_t prompt, args.Int("prompt", 512));
  ASSIGN_OR_RETURN(const int64_t new_tokens, args.Int("new-tokens", 64));
  ASSIGN_OR_RETURN(const int64_t threads, args.Int("threads", 2));
  ASSIGN_OR_RETURN(const auto batches, args.NumberList("batches", "1,8"));
  ASSIGN_OR_RETURN(const auto tolerances, args.NumberList("tolerances", "0,1e-3,1e-4"));
  SetComputeThreads(static_cast<int>(threads));

  ASSIGN_OR_RETURN(const std::unique_ptr<Model> model,
                   LoadModel(config_path, LoadFormat::kRandom, kDefaultKvBlockSize,
                             static_cast<uint64_t>(seed)));
  const ModelSpec& spec = model->spec();
  const KvLayout& kv = model->decoder().kv_layout();
  const int64_t state_bytes = model->decoder().recurrent_layout().bytes_per_slot();
  const int64_t kv_token_bytes = kv.floats_per_token * static_cast<int64_t>(sizeof(float));
  std::printf("config %s: %s, layers %s, %lld parameters, %lld threads\n", config_path.c_str(),
              spec.architecture.c_str(), spec.LayerPattern().c_str(),
              static_cast<long long>(spec.ParameterCount()), static_cast<long long>(threads));
  std::printf("memory per sequence: state %lld bytes + KV %lld bytes/token (fp32%s): ",
              static_cast<long long>(state_bytes), static_cast<long long>(kv_token_bytes), "");
  for (const int64_t context : {1024, 8192}) {
    const int64_t kv_bytes = kv.BlocksFor(context) * kv.floats_per_block() * int64_t{4};
    std::printf("%lldK %.2f MiB%s", static_cast<long long>(context / 1024),
                (state_bytes + kv_bytes) / double(1 << 20), context == 1024 ? ", " : "\n");
  }
  std::printf("%-6s %-9s %-12s %-14s %-14s %-12s %-12s\n", "batch", "tol", "prefill_tok/s",
              "decode_tok/s", "step_ms", "prefill_iters", "decode_iters");
  for (double batch : batches) {
    for (double tol : tolerances) {
      std::vector<GenerationRequest> requests(static_cast<size_t>(batch));
      for (size_t i = 0; i < requests.size(); ++i) {
        for (int64_t t = 0; t < prompt; ++t) {
          requests[i].prompt.push_back(
              static_cast<int32_t>((t * 7919 + i * 104729) % spec.vocab_size));
        }
        requests[i].sampling.max_tokens = static_cast<int32_t>(new_tokens);
        requests[i].sampling.temperature = 0.0f;
        requests[i].sampling.ignore_eos = true;
        requests[i].solver = {static_cast<float>(tol), DefaultSolverIterations(spec)};
      }
      GenerationTimings t;
      ASSIGN_OR_RETURN(const auto results, GenerateOffline(*model, requests, &t));
      SolverStats prefill, decode;
      for (const auto& r : results) {
        prefill.Merge(r.prefill_solver);
        decode.Merge(r.decode_solver);
      }
      const double decode_tokens = double(t.generated_tokens - static_cast<int64_t>(batch));
      std::printf("%-6.0f %-9.0e %-14.0f %-14.1f %-14.2f %-12.2f %-12.2f\n", batch, tol,
                  t.prompt_tokens / t.prefill_seconds, decode_tokens / t.decode_seconds,
                  1e3 * t.decode_seconds / std::max<int64_t>(t.decode_steps, 1),
                  prefill.MeanIterations(), decode.MeanIterations());
      std::fflush(stdout);
    }
  }
  if (args.Has("engine-load")) {
    ASSIGN_OR_RETURN(const auto list, args.NumberList("engine-load", ""));
    ASSIGN_OR_RETURN(const std::vector<int64_t> clients, EngineLoadClients(list));
    EngineLoadOptions load;
    ASSIGN_OR_RETURN(load.requests, args.Int("engine-requests", 64));
    load.prompt_tokens = prompt;
    load.new_tokens = static_cast<int32_t>(new_tokens);
    load.prompt_id_limit = static_cast<int32_t>(spec.vocab_size);
    for (int64_t c : clients) {
      load.concurrency = c;
      CpuBackend backend(&model->decoder(), c, c * kv.BlocksFor(prompt + new_tokens));
      RETURN_IF_ERROR(ReportEngineLoad(&backend, load));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ridge

int main(int argc, char** argv) {
  ridge::ReexecWithPassiveOpenMpWait(argv);
  const absl::Status status = ridge::Bench(argc - 1, argv + 1);
  if (!status.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
