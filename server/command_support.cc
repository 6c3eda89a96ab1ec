#include "server/command_support.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/threading.h"
#include "models/arch/load_model.h"

namespace ridge {

absl::StatusOr<std::unique_ptr<Model>> LoadModelFromFlags(const CliArgs& args) {
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
  if (format != "checkpoint" && format != "random") {
    return absl::InvalidArgumentError(
        absl::StrCat("--load-format must be checkpoint or random, not '", format, "'"));
  }
  ASSIGN_OR_RETURN(const int64_t block_size, args.Int("block-size", kDefaultKvBlockSize));
  if (block_size < 1 || block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--block-size ", block_size, " must be 1 to 1024"));
  }
  const bool random = format == "random";
  ASSIGN_OR_RETURN(
      std::unique_ptr<Model> model,
      LoadModel(dir, random ? LoadFormat::kRandom : LoadFormat::kCheckpoint, block_size));
  if (random) {
    Log(LogLevel::kWarning, "--load-format random: the weights are random, not ", dir,
        "'s; outputs are meaningless, speed and memory are the config's");
  }
  const ModelSpec& s = model->spec();
  const HeadShape heads = FirstLayerHeads(s);
  Log(LogLevel::kInfo, "loaded ", s.architecture, " from ", dir, ": ", s.layers.size(), " layers (",
      s.LayerPattern(), "), hidden ", s.hidden_size, ", ", heads.heads, " heads x ", heads.head_dim,
      ", vocab ", s.vocab_size, ", ", s.ParameterCount(), " parameters, ", MemorySummary(s), ", ",
      threads, " threads");
  return model;
}

absl::StatusOr<int64_t> MemorySizeFromFlag(const CliArgs& args, const std::string& flag) {
  const std::string text = args.StringOr(flag, "");
  int64_t scale = 1;
  std::string digits = text;
  if (!digits.empty() && std::string("KkMmGg").find(digits.back()) != std::string::npos) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
    scale = unit == 'K' ? int64_t{1} << 10 : unit == 'M' ? int64_t{1} << 20 : int64_t{1} << 30;
    digits.pop_back();
  }
  int64_t value = 0;
  const bool numeric = !digits.empty() && digits.size() <= 12 &&
                       std::all_of(digits.begin(), digits.end(), ::isdigit);
  if (numeric) value = std::stoll(digits);
  if (!numeric || value < 0 || value > (int64_t{1} << 50) / scale) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " '", text, "' must be a size in bytes, e.g. 4096M or 2G"));
  }
  return value * scale;
}

absl::StatusOr<int64_t> PrefixCacheSlotsFromFlags(const CliArgs& args, int64_t slots,
                                                  int64_t state_bytes) {
  if (args.Has("no-prefix-cache")) {
    if (args.Has("prefix-cache-memory")) {
      return absl::InvalidArgumentError(
          "--no-prefix-cache and --prefix-cache-memory: give one of them");
    }
    return 0;
  }
  if (!args.Has("prefix-cache-memory")) return slots;
  ASSIGN_OR_RETURN(const int64_t bytes, MemorySizeFromFlag(args, "prefix-cache-memory"));
  const int64_t count = state_bytes > 0 ? bytes / state_bytes : 0;
  if (bytes > 0 && count == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--prefix-cache-memory ",
                                                   args.StringOr("prefix-cache-memory", ""),
                                                   " is less than one state (", state_bytes,
                                                   " bytes); give 0 or --no-prefix-cache to "
                                                   "turn the cache off"));
  }
  return std::min<int64_t>(count, int64_t{1} << 20);
}

absl::StatusOr<int64_t> KvBlocksFromFlags(const CliArgs& args, int64_t block_bytes) {
  if (args.Has("kv-blocks") && args.Has("kv-cache-memory")) {
    return absl::InvalidArgumentError("--kv-blocks and --kv-cache-memory: give one of them");
  }
  if (args.Has("kv-blocks")) {
    ASSIGN_OR_RETURN(const int64_t blocks, args.Int("kv-blocks", 0));
    if (blocks < 1 || blocks > (int64_t{1} << 31) - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-blocks ", blocks, " must be 1 to 2^31-1"));
    }
    return blocks;
  }
  if (!args.Has("kv-cache-memory")) return 0;
  const std::string text = args.StringOr("kv-cache-memory", "");
  ASSIGN_OR_RETURN(const int64_t bytes, MemorySizeFromFlag(args, "kv-cache-memory"));
  if (block_bytes <= 0) return 0;  // no attention layers: nothing to size
  const int64_t blocks = bytes / block_bytes;
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-memory ", text, " is less than one KV block (", block_bytes, " bytes)"));
  }
  return blocks;
}

std::string MemorySummary(const ModelSpec& spec) {
  const int64_t state = PlanRecurrentLayout(spec).bytes_per_slot();
  const int64_t kv = PlanKvLayout(spec, 1).floats_per_token * static_cast<int64_t>(sizeof(float));
  return absl::StrCat("state ", state, " bytes per sequence, KV cache ", kv,
                      " bytes per token (fp32)");
}

absl::StatusOr<SolverOptions> SolverOptionsFromFlags(const CliArgs& args, const ModelSpec& spec) {
  SolverOptions options;
  ASSIGN_OR_RETURN(const double tolerance, args.Double("solver-tolerance", 0.0));
  ASSIGN_OR_RETURN(const int64_t iterations,
                   args.Int("solver-max-iterations", DefaultSolverIterations(spec)));
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
