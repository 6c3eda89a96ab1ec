// ridgeserve info: what a checkpoint is and what this machine offers, without running it.
#include <cstdio>

#include "base/status_macros.h"
#include "kernels/device_info.h"
#include "models/arch/load_model.h"
#include "server/command_support.h"
#include "server/commands.h"

namespace ridge {
namespace {

absl::Status Info(int argc, char** argv) {
  std::set<std::string> known(std::begin(kModelFlags), std::end(kModelFlags));
  ASSIGN_OR_RETURN(const CliArgs args, CliArgs::Parse(argc, argv, known));
  const auto devices = QueryCudaDevices();
  std::printf("CUDA support built: %s; GPUs visible: %zu\n", BuiltWithCuda() ? "yes" : "no",
              devices.size());
  for (const auto& d : devices) {
    std::printf("  %s, %.1f GiB, compute capability %d.%d\n", d.name.c_str(),
                d.total_memory_bytes / double(1 << 30), d.compute_major, d.compute_minor);
  }
  if (!args.Has("model")) return absl::OkStatus();
  // A checkpoint is loaded (so its tensors are checked); random weights are not made at all.
  ModelSpec spec;
  if (args.StringOr("load-format", "checkpoint") == "random") {
    ASSIGN_OR_RETURN(spec, ReadModelSpec(args.StringOr("model", "")));
  } else {
    ASSIGN_OR_RETURN(auto model, LoadModelFromFlags(args));
    spec = model->spec();
  }
  const HeadShape heads = FirstLayerHeads(spec);
  std::printf("%s: %zu layers, hidden %lld, vocab %lld, parameters %lld, tied embeddings %s\n",
              spec.architecture.c_str(), spec.layers.size(), (long long)spec.hidden_size,
              (long long)spec.vocab_size, (long long)spec.ParameterCount(),
              spec.tie_word_embeddings ? "yes" : "no");
  std::printf("  layers: %s\n", spec.LayerPattern().c_str());
  std::printf("  first layer: %lld heads x %lld; default solver iterations %d\n",
              (long long)heads.heads, (long long)heads.head_dim, DefaultSolverIterations(spec));
  const int64_t state = PlanRecurrentLayout(spec).bytes_per_slot();
  const int64_t kv_token = PlanKvLayout(spec, 1).floats_per_token * int64_t{sizeof(float)};
  std::printf(
      "  memory per sequence: %lld bytes of recurrent state + %lld bytes of KV cache a "
      "token (fp32)\n",
      (long long)state, (long long)kv_token);
  for (const int64_t context : {1024, 8192, 32768}) {
    std::printf("    at %lldK tokens: %.1f MiB\n", (long long)context / 1024,
                (state + kv_token * context) / double(1 << 20));
  }
  return absl::OkStatus();
}

}  // namespace

int RunInfoCommand(int argc, char** argv) {
  const absl::Status status = Info(argc, argv);
  return status.ok() ? 0 : ReportError("info", status);
}

}  // namespace ridge
