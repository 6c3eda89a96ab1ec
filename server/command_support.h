// Pieces shared by the subcommands: model loading with a start-up summary, solver flags.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/solver_types.h"
#include "models/mesanet_model.h"
#include "server/cli_args.h"

namespace ridge {

// Flags every model-running subcommand accepts, for CliArgs::Parse.
inline const char* const kModelFlags[] = {
    "model", "threads", "solver-tolerance", "solver-max-iterations", "log-level", "load-format"};

// The help lines of --load-format, shared by the subcommands' usage texts.
inline constexpr char kLoadFormatHelp[] =
    "  --load-format F   checkpoint (default): the weights of --model's safetensors; random:\n"
    "                    random weights in the shape of --model's config.json alone (seed 0),\n"
    "                    to measure a configuration without its checkpoint, as vLLM's dummy\n"
    "                    load format does\n";

// Applies --threads and --log-level, loads --model (--load-format) and logs what was loaded.
absl::StatusOr<std::unique_ptr<MesaNetModel>> LoadModelFromFlags(const CliArgs& args);

// --solver-tolerance / --solver-max-iterations over the model's defaults, validated.
absl::StatusOr<SolverOptions> SolverOptionsFromFlags(const CliArgs& args,
                                                     const MesaNetConfig& config);

// Prints "ridgeserve <command>: <message>" to stderr and returns exit code 2 (usage) or 1.
int ReportError(const std::string& command, const absl::Status& status);

}  // namespace ridge
