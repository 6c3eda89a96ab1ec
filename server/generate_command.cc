// ridgeserve generate: sample a continuation of a prompt given as token ids.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/offline_generation.h"
#include "server/backend_selection.h"
#include "server/command_support.h"
#include "server/commands.h"
#include "server/json_output.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

constexpr char kUsage[] =
    R"(usage: ridgeserve generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [flags]

With --prompt, the text is encoded with the tokenizer (tokenizer.json in --tokenizer DIR,
default the model folder) and the generated text is printed on stdout; with --prompt-ids the
generated token ids are printed (comma-separated). The finish reason and solver statistics go
to stderr.
  --tokenizer DIR           folder with tokenizer.json (default: --model)
  --max-tokens N            tokens to generate at most (default 16)
  --temperature T           0 = greedy (default 1)
  --top-k K                 keep the K most likely tokens (0 = off)
  --top-p P                 keep the smallest set of mass >= P (1 = off)
  --min-p P                 drop tokens below P x the top probability (0 = off)
  --repetition-penalty R    Hugging Face repetition penalty (1 = off)
  --presence-penalty P      OpenAI presence penalty in [-2, 2]
  --frequency-penalty F     OpenAI frequency penalty in [-2, 2]
  --seed S                  same seed, same tokens
  --stop-token-ids 5,6      stop when one of these is sampled
  --ignore-eos              keep going past the end-of-sequence token
  --json-object             JSON mode: the output is one JSON object, then ends (needs the
                            tokenizer; OpenAI's response_format json_object)
  --json-schema FILE        the output is one instance of the JSON Schema in FILE, then ends
                            (needs the tokenizer; OpenAI's response_format json_schema; the
                            subset supported is in the README)
  --solver-tolerance T      CG stops when ||r|| <= T ||r0|| (0 = run every iteration)
  --solver-max-iterations M solver iteration cap (default: the config's: MesaNet's
                            max_cg_step_decoding, GKA's num_iter)
  --threads N               CPU threads (default: all cores)
  --device auto|cpu|cuda    where the model runs (default auto: the GPU when one can run it)
  --cuda-device N           which GPU (default 0)
  --gpu-memory-utilization F
                            share of the GPU's memory a hybrid model may take (default 0.9)
  --kv-cache-dtype auto|bf16|fp8
                            the GPU's KV cache (auto: bf16; fp8: e4m3, half the bytes)
  --tensor-parallel-size N  split a hybrid_qwen3 model over N ranks (threads, on the CPU or on
                            GPUs, with NCCL when each rank has a GPU; default 1)
  --tensor-parallel-timeout S
                            a split step still running after S seconds fails and aborts the
                            collectives (default 600)
)";

absl::StatusOr<SamplingParams> SamplingFromFlags(const CliArgs& args) {
  SamplingParams p;
  ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max-tokens", p.max_tokens));
  ASSIGN_OR_RETURN(const int64_t top_k, args.Int("top-k", p.top_k));
  if (max_tokens < 0 || max_tokens > (1 << 30) || top_k < 0 || top_k > (1 << 30)) {
    return absl::InvalidArgumentError(
        "--max-tokens and --top-k must be non-negative and below 2^30");
  }
  p.max_tokens = static_cast<int32_t>(max_tokens);
  p.top_k = static_cast<int32_t>(top_k);
  ASSIGN_OR_RETURN(const double temperature, args.Double("temperature", p.temperature));
  ASSIGN_OR_RETURN(const double top_p, args.Double("top-p", p.top_p));
  ASSIGN_OR_RETURN(const double min_p, args.Double("min-p", p.min_p));
  ASSIGN_OR_RETURN(const double repetition,
                   args.Double("repetition-penalty", p.repetition_penalty));
  ASSIGN_OR_RETURN(const double presence, args.Double("presence-penalty", p.presence_penalty));
  ASSIGN_OR_RETURN(const double frequency, args.Double("frequency-penalty", p.frequency_penalty));
  p.temperature = static_cast<float>(temperature);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  p.repetition_penalty = static_cast<float>(repetition);
  p.presence_penalty = static_cast<float>(presence);
  p.frequency_penalty = static_cast<float>(frequency);
  if (args.Has("seed")) {
    ASSIGN_OR_RETURN(const int64_t seed, args.Int("seed", 0));
    if (seed < 0) return absl::InvalidArgumentError("--seed must be non-negative");
    p.seed = static_cast<uint64_t>(seed);
  }
  if (args.Has("stop-token-ids")) {
    ASSIGN_OR_RETURN(p.stop_token_ids, args.IdList("stop-token-ids"));
  }
  p.ignore_eos = args.Has("ignore-eos");
  return p;
}

absl::Status Generate(int argc, char** argv) {
  std::set<std::string> known(std::begin(kModelFlags), std::end(kModelFlags));
  known.insert({"prompt", "tokenizer", "prompt-ids", "max-tokens", "temperature", "top-k", "top-p",
                "min-p", "repetition-penalty", "presence-penalty", "frequency-penalty", "seed",
                "stop-token-ids", "ignore-eos", "json-object", "json-schema"});
  known.insert(std::begin(kBackendFlags), std::end(kBackendFlags));
  ASSIGN_OR_RETURN(const CliArgs args,
                   CliArgs::Parse(argc, argv, known, {"ignore-eos", "json-object"}));
  GenerationRequest request;
  if (args.Has("prompt") == args.Has("prompt-ids")) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --prompt-ids");
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (args.Has("json-object") && args.Has("json-schema")) {
    return absl::InvalidArgumentError("give at most one of --json-object and --json-schema");
  }
  std::shared_ptr<const JsonSchema> schema;
  if (args.Has("json-schema")) {
    ASSIGN_OR_RETURN(const std::string path, args.String("json-schema"));
    std::ifstream in(path, std::ios::binary);
    if (!in.is_open()) {
      return absl::NotFoundError(absl::StrCat("--json-schema: cannot read ", path));
    }
    std::stringstream text;
    text << in.rdbuf();
    auto compiled = JsonSchema::Parse(text.str());
    if (!compiled.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--json-schema ", path, ": ", compiled.status().message()));
    }
    schema = *std::move(compiled);
  }
  if (args.Has("prompt") || args.Has("json-object") || schema != nullptr) {
    ASSIGN_OR_RETURN(const std::string model_dir, args.String("model"));
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(args.StringOr("tokenizer", model_dir)));
  }
  if (args.Has("prompt")) {
    ASSIGN_OR_RETURN(const std::string text, args.String("prompt"));
    ASSIGN_OR_RETURN(request.prompt, tokenizer->Encode(text, /*add_special_tokens=*/true));
  } else {
    ASSIGN_OR_RETURN(request.prompt, args.IdList("prompt-ids"));
  }
  ASSIGN_OR_RETURN(request.sampling, SamplingFromFlags(args));
  ASSIGN_OR_RETURN(auto model, LoadModelFromFlags(args));
  ASSIGN_OR_RETURN(request.solver, SolverOptionsFromFlags(args, model->spec()));
  if (args.Has("json-object") || schema != nullptr) {
    ASSIGN_OR_RETURN(request.sampling.json_output,
                     JsonVocabularyOf(*tokenizer, static_cast<int32_t>(model->spec().vocab_size)));
    request.sampling.json_schema = schema;
  }
  const int64_t tokens = static_cast<int64_t>(request.prompt.size()) + request.sampling.max_tokens;
  ASSIGN_OR_RETURN(std::unique_ptr<ModelBackend> backend,
                   CreateBackendFromFlags(args, model.get(), /*num_slots=*/1,
                                          model->decoder().kv_layout().BlocksFor(tokens)));
  GenerationTimings timings;
  ASSIGN_OR_RETURN(const auto results, GenerateOffline(*backend, {&request, 1}, &timings));
  const GenerationResult& result = results[0];
  if (args.Has("prompt")) {
    ASSIGN_OR_RETURN(const std::string text,
                     tokenizer->Decode(result.tokens, /*skip_special_tokens=*/true));
    std::printf("%s\n", text.c_str());
  } else {
    std::printf("%s\n", absl::StrJoin(result.tokens, ",").c_str());
  }
  const SolverStats& s = result.decode_solver;
  std::fprintf(stderr,
               "finish %s  prompt %lld tokens in %.3f s  generated %zu tokens, decode %.1f tok/s  "
               "decode solver: mean iterations %.2f, capped %.1f%%\n",
               FinishReasonName(result.finish_reason),
               static_cast<long long>(timings.prompt_tokens), timings.prefill_seconds,
               result.tokens.size(), timings.decode_steps / std::max(timings.decode_seconds, 1e-9),
               s.MeanIterations(), 100.0 * s.CappedFraction());
  return absl::OkStatus();
}

}  // namespace

int RunGenerateCommand(int argc, char** argv) {
  if (argc >= 1 && std::string(argv[0]) == "--help") {
    std::fputs(kUsage, stdout);
    std::fputs(kLoadFormatHelp, stdout);
    return 0;
  }
  const absl::Status status = Generate(argc, argv);
  return status.ok() ? 0 : ReportError("generate", status);
}

}  // namespace ridge
