// Pieces shared by the subcommands: model loading with a start-up summary, solver flags.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/solver_types.h"
#include "models/model.h"
#include "server/cli_args.h"

namespace ridge {

// Flags every model-running subcommand accepts, for CliArgs::Parse.
inline const char* const kModelFlags[] = {
    "model",     "threads",     "solver-tolerance", "solver-max-iterations",
    "log-level", "load-format", "block-size"};

// The help lines of --load-format, shared by the subcommands' usage texts.
inline constexpr char kLoadFormatHelp[] =
    "  --load-format F   checkpoint (default): the weights of --model's safetensors; random:\n"
    "                    random weights in the shape of --model's config.json alone (seed 0),\n"
    "                    to measure a configuration without its checkpoint, as vLLM's dummy\n"
    "                    load format does\n"
    "  --block-size N    tokens per KV-cache block of full-attention layers (default 16, 1 to\n"
    "                    1024)\n";

// Applies --threads and --log-level, loads --model (--load-format) and logs what was loaded.
absl::StatusOr<std::unique_ptr<Model>> LoadModelFromFlags(const CliArgs& args);

// --solver-tolerance / --solver-max-iterations over the model's defaults, validated.
absl::StatusOr<SolverOptions> SolverOptionsFromFlags(const CliArgs& args, const ModelSpec& spec);

// The KV cache size asked for: --kv-blocks N, or --kv-cache-memory SIZE (bytes, or with a K,
// M or G suffix) in blocks of `block_bytes`; 0 when neither is given (the planner's default).
absl::StatusOr<int64_t> KvBlocksFromFlags(const CliArgs& args, int64_t block_bytes);
// A memory size flag's bytes: digits, optionally with a K, M or G suffix.
absl::StatusOr<int64_t> MemorySizeFromFlag(const CliArgs& args, const std::string& flag);
// States the prefix cache may hold: --prefix-cache-memory SIZE over `state_bytes` each (default:
// as many as `slots`), 0 with --no-prefix-cache.
absl::StatusOr<int64_t> PrefixCacheSlotsFromFlags(const CliArgs& args, int64_t slots,
                                                  int64_t state_bytes);
inline constexpr char kKvCacheHelp[] =
    "  --kv-cache-memory SIZE  memory for the KV cache of full-attention layers, in bytes or with\n"
    "                          a K, M or G suffix (default: room for 8192 tokens per slot within\n"
    "                          half of the available memory); clamped with a warning\n"
    "  --kv-blocks N           the same as a count of --block-size token blocks\n";

// One line on what a sequence's memory costs: state bytes, KV bytes per token.
std::string MemorySummary(const ModelSpec& spec);

// Prints "ridgeserve <command>: <message>" to stderr and returns exit code 2 (usage) or 1.
int ReportError(const std::string& command, const absl::Status& status);

}  // namespace ridge
