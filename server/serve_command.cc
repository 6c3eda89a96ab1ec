// ridgeserve serve: load a model and serve it over HTTP (OpenAI-compatible API, /metrics,
// health) until SIGTERM or SIGINT, then drain.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "models/model_fingerprint.h"
#include "server/api_keys.h"
#include "server/backend_selection.h"
#include "server/command_support.h"
#include "server/commands.h"
#include "server/generation_backend.h"
#include "server/http_server.h"
#include "server/prometheus_metrics.h"
#include "tokenizer/chat_template.h"
#ifdef RIDGE_HAVE_GRPC_SERVICE
#include "server/grpc_service.h"
#endif
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

constexpr char kUsage[] = R"(usage: ridgeserve serve --model DIR [flags]

Serves the model over HTTP: OpenAI-compatible POST /v1/completions, POST /v1/chat/completions
(streaming as server-sent events), GET /v1/models, GET /health, GET /ready, GET /metrics; and,
with --grpc-port, over gRPC: ridgeserve.v1.Generation, grpc.health.v1.Health, reflection.
SIGTERM or SIGINT drains: new requests get 503, running ones finish within --drain-seconds,
then the process exits 0. A backend that can no longer step (a tensor-parallel group whose
collectives were aborted after a rank's error or time-out) fails every request with that error,
turns /health and /ready to 503 and the process exits 1 after the same drain.

  --model DIR                  checkpoint folder (config.json + safetensors), required
  --tokenizer DIR              folder with tokenizer.json [+ tokenizer_config.json for the chat
                               template] (default: the model folder; without one, only prompts
                               given as token ids are accepted and responses carry token ids)
  --chat-template FILE         Jinja chat template to use instead of the tokenizer's (a
                               template the server cannot run stops the start-up, naming its
                               line and column)
  --reasoning-parser qwen3     chat replies carry the model's <think>...</think> text as
                               reasoning_content (streamed too), the rest as content
  --served-model-name NAME     the id clients pass as "model" (default: the model folder's name)
  --host ADDR                  address to listen on (default 127.0.0.1; 0.0.0.0 for all)
  --http-port N                HTTP port (default 8000; 0 picks a free port, logged at start)
  --grpc-port N                gRPC port on the same --host (0 picks a free port; default: no
                               gRPC server)
  --http-threads N             threads that parse, tokenize and template requests (and
                               read or write session files); a waiting or streaming answer
                               holds none (default 16)
  --http-max-connections N     HTTP connections open at once, streams included (default
                               16384, within the descriptor limit); past it new ones are closed
  --http-max-connections-per-client N
                               the same per client address (default 0: no limit; behind a
                               proxy every client shares its address)
  --http-idle-timeout S        a connection with no traffic for S seconds is closed; an answer
                               being produced does not time out (default 60)
  --http-header-timeout S      a connection whose request line and headers have not all
                               arrived S seconds after it opened (or after its previous
                               request) is closed, however slowly it sends (default 60)
  --device auto|cpu|cuda       where the model runs and its states live (default auto: the GPU
                               when this build has CUDA and one is present, else the CPU)
  --cuda-device N              which GPU with --device cuda or auto (default 0)
  --gpu-memory-utilization F   share of the GPU's memory a hybrid model may take in all
                               (weights, state slots, KV blocks, step buffers; default 0.9);
                               without --kv-blocks/--kv-cache-memory the KV cache fills it
  --kv-cache-dtype auto|bf16|fp8
                               how the GPU stores attention keys and values (auto: bf16;
                               fp8 = fp8_e4m3: e4m3 with per-vector scales, half the bytes;
                               the CPU keeps fp32 and takes auto only)
  --tensor-parallel-size N     split a hybrid_qwen3 model's heads, MLP and vocabulary over N
                               ranks (default 1), threads of this process: on the CPU (for
                               checking a split, not for speed) or on GPUs --cuda-device,
                               +1, ... (sharing them when fewer). A GPU a rank: NCCL's
                               collectives (RIDGE_NCCL_LIBRARY or libnccl.so.2); else through
                               host memory (correct, slower than one GPU)
  --tensor-parallel-timeout S  a split step (or a rank waiting in a collective) still running
                               after S seconds fails; its collectives are aborted, and an
                               aborted NCCL group stops the server (default 600)
  --slots N                    sequences generating at once: the state pool size; each slot
                               holds one fixed-size state (see the start-up log). Default: 64.
                               More than fit where the states live are clamped with a warning:
                               on the CPU to half of the available memory, on a GPU to its free
                               memory after the weights, less 1 GiB or 5% of the GPU (whichever
                               is more) for step buffers
  --prefix-cache-memory SIZE   memory for the prefix cache's states, in bytes or with a K, M
                               or G suffix (default: as many states as --slots). It keeps the
                               state (and shares the KV blocks) at the end of every prompt and
                               of every finished request, so a conversation's next turn
                               computes only its new tokens; least recently used states go
                               first, and KV blocks only it holds go back whenever sequences
                               need them. Counted at the fp32 state size of the model
  --no-prefix-cache            keep no states between requests
  --session-dir DIR            where POST /v1/sessions/{id}/save (gRPC SaveSession) writes
                               saved sessions and .../load reads them back, also after a
                               restart (created if missing; default: sessions stay in memory).
                               Requests name a session with session_id; at most half of the
                               prefix cache's states are sessions
  --max-waiting N              requests queued for a slot beyond the running ones; more are
                               rejected at once with 429 (default 256)
  --prefill-token-budget N     prompt tokens processed per engine step, so that long prompts
                               never stall decoding streams (default: the backend's, 512 on
                               the CPU; on a GPU, where a step's prompt chunks run in
                               parallel, about three waves of them: 4224 for 6 heads on an
                               H200)
  --api-key KEY                clients must send 'Authorization: Bearer KEY' (HTTP) or
                               'authorization: Bearer KEY' metadata (gRPC); 401 /
                               UNAUTHENTICATED otherwise. /health and /ready stay open
  --api-key-file PATH          more keys, one a line ('#' comments); with --api-key, both count
  --open-metrics               /metrics without a key (for a scraper inside the network)
  --ssl-certfile PATH          serve HTTPS and gRPC over TLS with this certificate (PEM; a
  --ssl-keyfile PATH           chain after the server's own) and its unencrypted key
  --ssl-ca-certs PATH          also require client certificates signed by these CAs (mutual
                               TLS); /health and /ready too, so probes need one
  --max-prompt-tokens N        longer prompts are rejected with 413 (default: the model's
                               context (max_position_embeddings, else 1048576), and at most
                               32768 on the CPU, where longer prompts take minutes)
  --max-tokens-limit N         the largest max_tokens a request may ask for (default 65536)
  --solver-tolerance T         default stopping rule (CG: ||r|| <= T ||r0||; Chebyshev:
                               ||A x - q|| <= T ||q||) for requests that set
                               no solver_tolerance; 0 runs every iteration (default 0)
  --solver-max-iterations M    default iteration cap for requests that set no
                               solver_max_iterations (default: the config's: MesaNet's
                               max_cg_step_decoding, GKA's num_iter)
  --max-solver-iterations M    the largest solver_max_iterations a request may ask for
                               (default 100, or the config's count when that is larger)
  --threads N                  CPU threads for the model (default: all cores)
  --log-level L                debug, info, warning or error (default info)
  --drain-seconds S            grace period for running requests after SIGTERM (default 30)
)";

// Raised by the engine's thread when the backend can no longer step (the serve loop then drains
// and exits with an error).
constexpr int kBackendFailedSignal = SIGUSR1;

// Blocks the shutdown signals in this thread (and every thread it starts afterwards), so that
// only WaitForShutdownSignal receives them.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, kBackendFailedSignal);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server
  return set;
}

int WaitForShutdownSignal(const sigset_t& set) {
  int signal_number = 0;
  sigwait(&set, &signal_number);
  return signal_number;
}

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
};

absl::StatusOr<LoadedTokenizer> LoadTokenizer(const CliArgs& args, int64_t model_vocab) {
  LoadedTokenizer out;
  const bool explicit_dir = args.Has("tokenizer");
  const std::filesystem::path dir = args.StringOr("tokenizer", args.StringOr("model", ""));
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    if (explicit_dir) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenizer ", dir.string(), ": no tokenizer.json in that folder"));
    }
    Log(LogLevel::kWarning, "no tokenizer.json in ", dir.string(),
        ": only prompts given as token ids are accepted (pass --tokenizer DIR for text)");
    return out;
  }
  ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::Load(dir));
  if (out.tokenizer->vocab_size() > model_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer in ", dir.string(), " has ", out.tokenizer->vocab_size(),
        " ids but the model's vocabulary is ", model_vocab, ": they do not belong together"));
  }
  // --chat-template FILE replaces the checkpoint's template. Either way a template the
  // interpreter cannot run stops the start-up here, with its line and column.
  const ChatSpecialTokens special_tokens = ChatSpecialTokens::FromConfig(out.tokenizer->config());
  std::string template_origin;
  if (args.Has("chat-template")) {
    const std::string path = args.StringOr("chat-template", "");
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("--chat-template ", path, ": cannot read"));
    }
    std::stringstream text;
    text << in.rdbuf();
    ASSIGN_OR_RETURN(ChatTemplate parsed,
                     ChatTemplate::FromSource(path, text.str(), special_tokens));
    out.chat_template = std::make_unique<ChatTemplate>(std::move(parsed));
    template_origin = path;
  } else {
    const NamedChatTemplate* chosen = nullptr;
    for (const auto& t : out.tokenizer->config().chat_templates) {
      if (chosen == nullptr || t.name == "default") chosen = &t;
    }
    if (chosen == nullptr) {
      Log(LogLevel::kWarning,
          "the tokenizer has no chat template: /v1/chat/completions answers 400 (pass "
          "--chat-template FILE to give one)");
    } else {
      auto parsed = ChatTemplate::FromSource(chosen->name, chosen->source, special_tokens);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer_config.json in ", dir.string(), ": ", std::string(parsed.status().message()),
            " (pass --chat-template FILE to use another template)"));
      }
      out.chat_template = std::make_unique<ChatTemplate>(*std::move(parsed));
      template_origin = absl::StrCat("'", chosen->name, "' of tokenizer_config.json");
    }
  }
  Log(LogLevel::kInfo, "tokenizer from ", dir.string(), ": ", out.tokenizer->vocab_size(),
      " ids, chat template ", out.chat_template ? template_origin : std::string("none"));
  return out;
}

// The prompt limit when --max-prompt-tokens is not given: the model's context, and on the CPU at
// most kCpuDefaultPromptTokens (tens of seconds of prefill for the small models; minutes beyond),
// so that no default lets one request hold the machine for minutes. A flag away either way.
constexpr int64_t kCpuDefaultPromptTokens = 32768;
constexpr int64_t kDefaultPromptTokens = int64_t{1} << 20;

int64_t DefaultMaxPromptTokens(const ModelSpec& spec, std::string_view device) {
  int64_t limit =
      spec.max_position_embeddings > 0 ? spec.max_position_embeddings : kDefaultPromptTokens;
  if (device == "cpu") limit = std::min(limit, kCpuDefaultPromptTokens);
  return limit;
}

absl::StatusOr<EngineOptions> EngineOptionsFromFlags(const CliArgs& args, const ModelSpec& spec) {
  EngineOptions o;
  ASSIGN_OR_RETURN(o.max_slots, args.Int("slots", o.max_slots));
  if (o.max_slots < 1) return absl::InvalidArgumentError("--slots must be >= 1");
  ASSIGN_OR_RETURN(o.max_waiting, args.Int("max-waiting", o.max_waiting));
  ASSIGN_OR_RETURN(o.prefill_token_budget,
                   args.Int("prefill-token-budget", o.prefill_token_budget));
  ASSIGN_OR_RETURN(o.max_prompt_tokens, args.Int("max-prompt-tokens", o.max_prompt_tokens));
  ASSIGN_OR_RETURN(o.max_new_tokens, args.Int("max-tokens-limit", o.max_new_tokens));
  if (o.max_new_tokens < 1 || o.max_new_tokens > (1 << 30)) {
    return absl::InvalidArgumentError("--max-tokens-limit must be 1 to 2^30");
  }
  if (o.max_prompt_tokens < 1)
    return absl::InvalidArgumentError("--max-prompt-tokens must be >= 1");
  ASSIGN_OR_RETURN(const int64_t max_iterations,
                   args.Int("max-solver-iterations",
                            std::max(o.max_solver_iterations, DefaultSolverIterations(spec))));
  if (max_iterations < 1 || max_iterations > kSolverIterationLimit) {
    return absl::InvalidArgumentError(absl::StrCat("--max-solver-iterations ", max_iterations,
                                                   " must be 1 to ", kSolverIterationLimit));
  }
  o.max_solver_iterations = static_cast<int32_t>(max_iterations);
  ASSIGN_OR_RETURN(o.default_solver, SolverOptionsFromFlags(args, spec));
  if (o.default_solver.max_iterations > o.max_solver_iterations) {
    return absl::InvalidArgumentError(
        absl::StrCat("--solver-max-iterations ", o.default_solver.max_iterations,
                     " is above --max-solver-iterations ", o.max_solver_iterations));
  }
  RETURN_IF_ERROR(ValidateEngineOptions(o));
  return o;
}

// --session-dir (created if missing, and must be writable) and the model's fingerprint, which
// every saved session carries.
absl::Status ConfigureSessions(const CliArgs& args, EngineOptions& options) {
  ASSIGN_OR_RETURN(options.model_fingerprint,
                   ModelFingerprint(args.StringOr("model", ""),
                                    args.StringOr("load-format", "checkpoint") == "random"));
  if (!args.Has("session-dir")) return absl::OkStatus();
  const std::filesystem::path dir = args.StringOr("session-dir", "");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const std::filesystem::path probe = dir / ".ridgeserve-write-check";
  std::ofstream(probe) << "ok";
  if (error || !std::filesystem::exists(probe)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session-dir ", dir.string(), ": cannot create or write to it"));
  }
  std::filesystem::remove(probe, error);
  options.session_dir = dir.string();
  Log(LogLevel::kInfo, "sessions: saved to and loaded from ", dir.string());
  return absl::OkStatus();
}

absl::Status Serve(int argc, char** argv) {
  std::set<std::string> known(std::begin(kModelFlags), std::end(kModelFlags));
  known.insert({"tokenizer", "served-model-name", "host", "http-port", "http-threads", "slots",
                "max-waiting", "prefill-token-budget", "max-prompt-tokens", "max-tokens-limit",
                "max-solver-iterations", "drain-seconds", "grpc-port", "kv-blocks",
                "kv-cache-memory", "api-key", "api-key-file", "open-metrics"});
  known.insert({"http-max-connections", "http-max-connections-per-client", "http-idle-timeout",
                "http-header-timeout"});
  known.insert({"prefix-cache-memory", "no-prefix-cache", "session-dir"});
  known.insert({"chat-template", "reasoning-parser"});
  known.insert({"ssl-certfile", "ssl-keyfile", "ssl-ca-certs"});
  known.insert(std::begin(kBackendFlags), std::end(kBackendFlags));
  ASSIGN_OR_RETURN(const CliArgs args,
                   CliArgs::Parse(argc, argv, known, {"open-metrics", "no-prefix-cache"}));
  const sigset_t shutdown_signals = BlockShutdownSignals();

  ASSIGN_OR_RETURN(const int64_t port, args.Int("http-port", 8000));
  if (port < 0 || port > 65535) return absl::InvalidArgumentError("--http-port must be 0 to 65535");
  ASSIGN_OR_RETURN(const int64_t grpc_port, args.Int("grpc-port", -1));
  if (grpc_port < -1 || grpc_port > 65535) {
    return absl::InvalidArgumentError("--grpc-port must be 0 to 65535");
  }
#ifndef RIDGE_HAVE_GRPC_SERVICE
  if (grpc_port >= 0) {
    return absl::FailedPreconditionError("--grpc-port: this build has no gRPC support");
  }
#endif
  ASSIGN_OR_RETURN(const double drain_seconds, args.Double("drain-seconds", 30.0));
  if (!(drain_seconds >= 0 && drain_seconds <= 86400)) {
    return absl::InvalidArgumentError("--drain-seconds must be 0 to 86400");
  }
  const std::string reasoning_parser = args.StringOr("reasoning-parser", "");
  if (!reasoning_parser.empty() && reasoning_parser != "qwen3") {
    return absl::InvalidArgumentError(absl::StrCat("--reasoning-parser ", reasoning_parser,
                                                   ": the only reasoning parser is qwen3"));
  }
  ASSIGN_OR_RETURN(auto model, LoadModelFromFlags(args));
  const ModelSpec spec = model->spec();  // a copy: the model may be released below
  ASSIGN_OR_RETURN(EngineOptions engine_options, EngineOptionsFromFlags(args, spec));
  // --prefix-cache-memory counts states as the backend the flags pick stores them.
  ASSIGN_OR_RETURN(const int64_t planned_state_bytes,
                   StateBytesPerSlotFromFlags(args, model.get()));
  ASSIGN_OR_RETURN(engine_options.prefix_cache_slots,
                   PrefixCacheSlotsFromFlags(args, engine_options.max_slots, planned_state_bytes));
  ASSIGN_OR_RETURN(LoadedTokenizer tokenizer, LoadTokenizer(args, spec.vocab_size));
  RETURN_IF_ERROR(ConfigureSessions(args, engine_options));
  const KvLayout& kv = model->decoder().kv_layout();
  ASSIGN_OR_RETURN(const int64_t kv_blocks,
                   KvBlocksFromFlags(args, kv.floats_per_block() * int64_t{sizeof(float)}));

  HttpServerOptions http_options;
  std::filesystem::path model_dir = std::filesystem::weakly_canonical(args.StringOr("model", ""));
  if (model_dir.filename().empty()) model_dir = model_dir.parent_path();  // "dir/"
  http_options.model_id = args.StringOr("served-model-name", model_dir.filename().string());
  http_options.reasoning_parser = reasoning_parser;
  http_options.limits.vocab_size = static_cast<int32_t>(spec.vocab_size);
  http_options.limits.max_new_tokens = static_cast<int32_t>(engine_options.max_new_tokens);
  http_options.limits.max_solver_iterations = engine_options.max_solver_iterations;
  http_options.limits.default_chat_max_tokens =
      std::min<int32_t>(http_options.limits.default_chat_max_tokens,
                        static_cast<int32_t>(engine_options.max_new_tokens));
  http_options.default_solver = engine_options.default_solver;
  http_options.created = static_cast<int64_t>(std::time(nullptr));
  ASSIGN_OR_RETURN(http_options.api_keys,
                   ApiKeys::Load(args.StringOr("api-key", ""), args.StringOr("api-key-file", "")));
  http_options.open_metrics = args.Has("open-metrics");
  ASSIGN_OR_RETURN(http_options.tls, LoadTlsOptions(args.StringOr("ssl-certfile", ""),
                                                    args.StringOr("ssl-keyfile", ""),
                                                    args.StringOr("ssl-ca-certs", "")));
  if (http_options.tls.enabled()) {
    Log(LogLevel::kInfo, "TLS: certificate ", http_options.tls.cert_file,
        http_options.tls.verify_clients()
            ? absl::StrCat("; clients need a certificate signed by ", http_options.tls.ca_file)
            : std::string());
  }
  if (http_options.api_keys.enabled()) {
    Log(LogLevel::kInfo, "API keys: ", http_options.api_keys.size(),
        " (HTTP 'Authorization: Bearer', gRPC 'authorization' metadata); /health and /ready are "
        "open, /metrics ",
        http_options.open_metrics ? "open (--open-metrics)" : "needs a key too");
  }
  ASSIGN_OR_RETURN(const int64_t http_threads, args.Int("http-threads", 16));
  if (http_threads < 1 || http_threads > 1024) {
    return absl::InvalidArgumentError("--http-threads must be 1 to 1024");
  }
  http_options.connections.worker_threads = static_cast<int>(http_threads);
  http_options.connections.event_threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 2, 8);
  ASSIGN_OR_RETURN(const int64_t max_connections, args.Int("http-max-connections", 16384));
  ASSIGN_OR_RETURN(const int64_t per_client, args.Int("http-max-connections-per-client", 0));
  ASSIGN_OR_RETURN(const int64_t idle_timeout, args.Int("http-idle-timeout", 60));
  if (max_connections < 16 || max_connections > 1000000) {
    return absl::InvalidArgumentError("--http-max-connections must be 16 to 1000000");
  }
  if (per_client < 0 || per_client > max_connections) {
    return absl::InvalidArgumentError(
        "--http-max-connections-per-client must be 0 (no limit) to --http-max-connections");
  }
  if (idle_timeout < 1 || idle_timeout > 86400) {
    return absl::InvalidArgumentError("--http-idle-timeout must be 1 to 86400 seconds");
  }
  ASSIGN_OR_RETURN(const int64_t header_timeout, args.Int("http-header-timeout", 60));
  if (header_timeout < 1 || header_timeout > 3600) {
    return absl::InvalidArgumentError("--http-header-timeout must be 1 to 3600 seconds");
  }
  http_options.connections.header_timeout_seconds = static_cast<int>(header_timeout);
  http_options.connections.max_connections = static_cast<int>(max_connections);
  http_options.connections.max_connections_per_client = static_cast<int>(per_client);
  http_options.connections.idle_timeout_seconds = static_cast<int>(idle_timeout);

  ASSIGN_OR_RETURN(std::unique_ptr<ModelBackend> model_backend,
                   CreateBackendFromFlags(
                       args, model.get(),
                       engine_options.max_slots + engine_options.prefix_cache_slots, kv_blocks));
  // A GPU backend holds its own copy of the weights: the host's fp32 ones (twice the size of
  // a bf16 checkpoint) are not needed any more.
  if (model_backend->name() != "cpu") model.reset();
  if (model_backend->state_bytes_per_slot() != planned_state_bytes && model != nullptr) {
    // --device auto fell back to the CPU, whose states are larger: count them again, and make
    // the pool again at that count (the CPU's slots are allocated up front).
    ASSIGN_OR_RETURN(const int64_t fit,
                     PrefixCacheSlotsFromFlags(args, engine_options.max_slots,
                                               model_backend->state_bytes_per_slot()));
    if (fit < engine_options.prefix_cache_slots) {
      engine_options.prefix_cache_slots = fit;
      model_backend.reset();
      ASSIGN_OR_RETURN(
          model_backend,
          CreateBackendFromFlags(args, model.get(), engine_options.max_slots + fit, kv_blocks));
    }
  }
  // The backend may hold fewer states than asked for, as many as fit where its pool lives (host
  // or GPU memory; it says so in a warning): the prefix cache gives up its states first.
  const int64_t cache_asked = engine_options.prefix_cache_slots;
  engine_options.prefix_cache_slots = std::min(
      cache_asked, std::max<int64_t>(0, model_backend->num_slots() - engine_options.max_slots));
  if (engine_options.prefix_cache_slots < cache_asked) {
    Log(LogLevel::kWarning, "prefix cache: ", engine_options.prefix_cache_slots, " states of the ",
        cache_asked, " asked for fit beside ", engine_options.max_slots, " slots");
  }
  engine_options.max_slots = std::min(
      engine_options.max_slots, model_backend->num_slots() - engine_options.prefix_cache_slots);
  if (!args.Has("prefill-token-budget")) {
    engine_options.prefill_token_budget = model_backend->preferred_prefill_tokens_per_step();
  }
  if (!args.Has("max-prompt-tokens")) {
    engine_options.max_prompt_tokens = DefaultMaxPromptTokens(spec, model_backend->name());
  }
  http_options.max_prompt_tokens = engine_options.max_prompt_tokens;
  if (const KvLayout& backend_kv = model_backend->kv_layout(); !backend_kv.empty()) {
    const int64_t blocks = model_backend->num_kv_blocks();
    const int64_t tokens = blocks * backend_kv.block_size;
    Log(LogLevel::kInfo, "KV cache: ", blocks, " blocks of ", backend_kv.block_size, " tokens (",
        blocks * backend_kv.bytes_per_block(), " bytes): ", tokens, " tokens in all, e.g. ",
        tokens / 1024, " sequences of 1K tokens, ", tokens / 8192,
        " of 8K (sliding-window layers keep their window in the state slot)");
  }
  PrometheusMetrics metrics(RecurrentLayerType(spec));
  // Written by the engine's thread before it raises kBackendFailedSignal, read after sigwait.
  struct BackendFailure {
    std::mutex mutex;
    absl::Status why;
  };
  auto backend_failure = std::make_shared<BackendFailure>();
  engine_options.on_backend_failure = [backend_failure](const absl::Status& why) {
    {
      std::lock_guard<std::mutex> lock(backend_failure->mutex);
      backend_failure->why = why;
    }
    kill(getpid(), kBackendFailedSignal);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                   Engine::Create(model_backend.get(), engine_options, &metrics));
  EngineBackend backend(engine.get());
  HttpServer http(&backend, tokenizer.tokenizer.get(), tokenizer.chat_template.get(), &metrics,
                  http_options);
  const std::string host = args.StringOr("host", "127.0.0.1");
  ASSIGN_OR_RETURN(const int bound_port, http.Bind(host, static_cast<int>(port)));
#ifdef RIDGE_HAVE_GRPC_SERVICE
  // Started before the HTTP thread: an error return after that thread exists would terminate.
  std::unique_ptr<GrpcServer> grpc;
  if (grpc_port >= 0) {
    ASSIGN_OR_RETURN(grpc, GrpcServer::Start(engine.get(), tokenizer.tokenizer.get(),
                                             {.address = absl::StrCat(host, ":", grpc_port),
                                              .model_name = http_options.model_id,
                                              .api_keys = http_options.api_keys,
                                              .tls = http_options.tls}));
  }
#endif
  std::thread http_thread([&http] { http.Run(); });

  Log(LogLevel::kInfo, "serving model '", http_options.model_id, "' on ",
      http_options.tls.enabled() ? "https://" : "http://", host, ":", bound_port, ": ",
      engine_options.max_slots, " slots x ", model_backend->state_bytes_per_slot(),
      " state bytes = ", engine_options.max_slots * model_backend->state_bytes_per_slot(),
      " bytes, prefix cache ", engine_options.prefix_cache_slots, " states (",
      engine_options.prefix_cache_slots * model_backend->state_bytes_per_slot(), " bytes), queue ",
      engine_options.max_waiting, ", prefill budget ", engine_options.prefill_token_budget,
      " tokens/step, default solver tolerance ", engine_options.default_solver.tolerance, " / ",
      engine_options.default_solver.max_iterations, " iterations (requests may ask up to ",
      engine_options.max_solver_iterations, ")");
  http.SetReady(true);

  const int signal_number = WaitForShutdownSignal(shutdown_signals);
  const auto failure_so_far = [&backend_failure] {
    std::lock_guard<std::mutex> lock(backend_failure->mutex);
    return backend_failure->why;
  };
  const absl::Status failure = failure_so_far();
  if (!failure.ok()) {
    Log(LogLevel::kError, failure.message(), ": draining, then exiting");
  } else {
    Log(LogLevel::kInfo, "received ", strsignal(signal_number),
        ": draining (new requests get 503; up to ", drain_seconds, " s for running ones)");
  }
  http.StartDrain();
#ifdef RIDGE_HAVE_GRPC_SERVICE
  if (grpc) grpc->SetServing(false);
#endif
  engine->StartDrain();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(drain_seconds));
  const auto drain_start = std::chrono::steady_clock::now();
  const bool idle = engine->WaitIdle(deadline) && http.WaitForActiveRequests(deadline);
  Log(LogLevel::kInfo, "drain: ", idle ? "all requests finished" : "grace period over", " after ",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_start).count(), " s");
  if (!idle) {
    const EngineSnapshot s = engine->Snapshot();
    Log(LogLevel::kWarning, "drain period over with ", s.running, " running and ", s.waiting,
        " waiting requests: cancelling them");
    http.CancelAll();
    http.WaitForActiveRequests(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
#ifdef RIDGE_HAVE_GRPC_SERVICE
  if (grpc) grpc->Shutdown(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  grpc.reset();
#endif
  http.Stop();
  http_thread.join();
  engine.reset();
  Log(LogLevel::kInfo, "drained, exiting");
  return failure_so_far();  // also when the backend failed during a drain begun by a signal
}

}  // namespace

int RunServeCommand(int argc, char** argv) {
  if (argc >= 1 && std::string(argv[0]) == "--help") {
    std::fputs(kUsage, stdout);
    std::fputs(kLoadFormatHelp, stdout);
    std::fputs(kKvCacheHelp, stdout);
    return 0;
  }
  const absl::Status status = Serve(argc, argv);
  return status.ok() ? 0 : ReportError("serve", status);
}

}  // namespace ridge
