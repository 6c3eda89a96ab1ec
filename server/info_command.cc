// ridgeserve info: what a checkpoint is and what this machine offers, without running it.
#include <cstdio>

#include "base/status_macros.h"
#include "kernels/device_info.h"
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
  ASSIGN_OR_RETURN(auto model, LoadModelFromFlags(args));
  const MesaNetConfig& c = model->config();
  std::printf(
      "MesaNet: layers %lld, hidden %lld, heads %lld x %lld, conv %lld, MLP %lld, vocab %lld\n"
      "  output gate %s, tied embeddings %s, parameters %lld\n"
      "  state per sequence: %lld bytes, default CG iterations %lld\n",
      (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.num_heads,
      (long long)c.head_dim, (long long)c.conv_size, (long long)c.intermediate_size,
      (long long)c.vocab_size, c.use_output_gate ? "yes" : "no",
      c.tie_word_embeddings ? "yes" : "no", (long long)c.ParameterCount(),
      (long long)c.StateBytes(), (long long)c.max_cg_step_decoding);
  return absl::OkStatus();
}

}  // namespace

int RunInfoCommand(int argc, char** argv) {
  const absl::Status status = Info(argc, argv);
  return status.ok() ? 0 : ReportError("info", status);
}

}  // namespace ridge
