#include "server/command_support.h"

#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/threading.h"

namespace ridge {

absl::StatusOr<std::unique_ptr<MesaNetModel>> LoadModelFromFlags(const CliArgs& args) {
  ASSIGN_OR_RETURN(const LogLevel level, ParseLogLevel(args.StringOr("log-level", "info")));
  SetLogLevel(level);
  const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  ASSIGN_OR_RETURN(const int64_t threads, args.Int("threads", hardware));
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--threads ", threads, " must be 1 to 1024"));
  }
  SetComputeThreads(static_cast<int>(threads));
  ASSIGN_OR_RETURN(const std::string dir, args.String("model"));
  const std::string format = args.StringOr("load-format", "checkpoint");
  std::unique_ptr<MesaNetModel> model;
  if (format == "checkpoint") {
    ASSIGN_OR_RETURN(model, MesaNetModel::Load(dir));
  } else if (format == "random") {
    ASSIGN_OR_RETURN(model, MesaNetModel::Random(dir, /*seed=*/0));
    Log(LogLevel::kWarning, "--load-format random: the weights are random, not ", dir,
        "'s; outputs are meaningless, speed and memory are the config's");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--load-format must be checkpoint or random, not '", format, "'"));
  }
  const MesaNetConfig& c = model->config();
  Log(LogLevel::kInfo, "loaded MesaNet from ", dir, ": ", c.num_hidden_layers, " layers, hidden ",
      c.hidden_size, ", ", c.num_heads, " heads x ", c.head_dim, ", vocab ", c.vocab_size, ", ",
      c.ParameterCount(), " parameters, state ", c.StateBytes(), " bytes per sequence, ", threads,
      " threads");
  return model;
}

absl::StatusOr<SolverOptions> SolverOptionsFromFlags(const CliArgs& args,
                                                     const MesaNetConfig& config) {
  SolverOptions options;
  ASSIGN_OR_RETURN(const double tolerance, args.Double("solver-tolerance", 0.0));
  ASSIGN_OR_RETURN(const int64_t iterations,
                   args.Int("solver-max-iterations", config.max_cg_step_decoding));
  if (iterations < 1 || iterations > kSolverIterationLimit) {
    return absl::InvalidArgumentError(absl::StrCat("--solver-max-iterations ", iterations,
                                                   " must be 1 to ", kSolverIterationLimit));
  }
  options.tolerance = static_cast<float>(tolerance);
  options.max_iterations = static_cast<int32_t>(iterations);
  RETURN_IF_ERROR(ValidateSolverOptions(options, kSolverIterationLimit));
  return options;
}

int ReportError(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "ridgeserve %s: %s\n", command.c_str(),
               std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace ridge
