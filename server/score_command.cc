// ridgeserve score: teacher-forced logits of a token sequence, written as float32 [T, vocab].
#include <cstdio>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/scoring.h"
#include "server/backend_selection.h"
#include "server/command_support.h"
#include "server/commands.h"

namespace ridge {
namespace {

constexpr char kUsage[] =
    R"(usage: ridgeserve score --model DIR (--ids 1,2,3 | --ids-file FILE) --output FILE
                        [--decode-from N] [--solver-tolerance T] [--solver-max-iterations M]
                        [--threads N] [--log-level L]

Writes the logits of every position of the ids (teacher forcing) to FILE as float32
little-endian, shape [T, vocab], row-major. Without --decode-from the ids run as one prefill;
with it the first N run as a prefill and the rest one token at a time through the decode path.
Prints the perplexity of the ids and the solver statistics to stderr.
  --ids-file FILE          ids separated by commas or whitespace
  --solver-tolerance T     stop CG when ||r|| <= T ||r0||; 0 (default) runs every iteration
  --solver-max-iterations  solver iteration cap (default: the config's: MesaNet's
                           max_cg_step_decoding, GKA's num_iter)
  --device auto|cpu|cuda   where the model runs (default auto: the GPU when one can run it)
  --cuda-device N          which GPU (default 0)
  --gpu-memory-utilization F
                           share of the GPU's memory a hybrid model may take (default 0.9)
  --kv-cache-dtype auto|bf16|fp8
                           the GPU's KV cache (auto: bf16; fp8: e4m3, half the bytes)
  --tensor-parallel-size N split a hybrid_qwen3 model over N ranks (threads, on the CPU or on
                           GPUs, with NCCL when each rank has a GPU; default 1)
  --tensor-parallel-timeout S
                           a split step still running after S seconds fails and aborts the
                           collectives (default 600)
)";

absl::Status Score(int argc, char** argv) {
  std::set<std::string> known(std::begin(kModelFlags), std::end(kModelFlags));
  known.insert({"ids", "ids-file", "output", "decode-from"});
  known.insert(std::begin(kBackendFlags), std::end(kBackendFlags));
  ASSIGN_OR_RETURN(const CliArgs args, CliArgs::Parse(argc, argv, known));
  std::vector<int32_t> ids;
  if (args.Has("ids") == args.Has("ids-file")) {
    return absl::InvalidArgumentError("give exactly one of --ids and --ids-file");
  }
  if (args.Has("ids")) {
    ASSIGN_OR_RETURN(ids, args.IdList("ids"));
  } else {
    ASSIGN_OR_RETURN(const std::string path, args.String("ids-file"));
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read --ids-file ", path));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSIGN_OR_RETURN(ids, ParseIdList(text, path));
  }
  ASSIGN_OR_RETURN(const std::string output, args.String("output"));
  std::optional<int64_t> decode_from;
  if (args.Has("decode-from")) {
    ASSIGN_OR_RETURN(decode_from, args.Int("decode-from", 0));
  }
  ASSIGN_OR_RETURN(auto model, LoadModelFromFlags(args));
  ASSIGN_OR_RETURN(const SolverOptions solver, SolverOptionsFromFlags(args, model->spec()));
  const int64_t blocks = model->decoder().kv_layout().BlocksFor(static_cast<int64_t>(ids.size()));
  ASSIGN_OR_RETURN(std::unique_ptr<ModelBackend> backend,
                   CreateBackendFromFlags(args, model.get(), /*num_slots=*/1, blocks));
  ASSIGN_OR_RETURN(const ScoreResult result, ScoreSequence(*backend, ids, decode_from, solver));

  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(result.logits.data()),
            static_cast<std::streamsize>(result.logits.size() * sizeof(float)));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write --output ", output));
  const SolverStats& s = result.solver_stats;
  std::fprintf(stderr,
               "tokens %zu  perplexity %.4f  solves %lld  mean iterations %.2f  max %d  "
               "capped %.1f%%  mean relative residual %.3g\n",
               ids.size(), result.perplexity, static_cast<long long>(s.solves), s.MeanIterations(),
               s.max_iterations, 100.0 * s.CappedFraction(), s.MeanRelativeResidual());
  return absl::OkStatus();
}

}  // namespace

int RunScoreCommand(int argc, char** argv) {
  if (argc >= 1 && std::string(argv[0]) == "--help") {
    std::fputs(kUsage, stdout);
    std::fputs(kLoadFormatHelp, stdout);
    return 0;
  }
  const absl::Status status = Score(argc, argv);
  return status.ok() ? 0 : ReportError("score", status);
}

}  // namespace ridge
