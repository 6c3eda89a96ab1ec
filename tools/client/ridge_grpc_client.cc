// ridge_grpc_client: a small example client of the ridgeserve gRPC API (generation.proto).
//
//   ridge_grpc_client --address 127.0.0.1:9000 --prompt "Once upon a time" --max-tokens 32 --stream
//   ridge_grpc_client --address 127.0.0.1:9000 --prompt-ids 1,2,3 --max-tokens 8
//   ridge_grpc_client --address 127.0.0.1:9000 --info
//
// Prints the generated text (or token ids when the server has no tokenizer) as it arrives, then
// the finish reason and usage on stderr, and the log-probabilities asked for (--logprobs,
// --top-logprobs, --prompt-logprobs) on stderr, one token a line.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ridgeserve/v1/generation.grpc.pb.h"
#include "server/cli_args.h"

namespace ridge {
namespace {

namespace v1 = ::ridgeserve::v1;

constexpr char kUsage[] =
    R"(usage: ridge_grpc_client --address HOST:PORT (--prompt TEXT | --prompt-ids 1,2,3 | --info) [flags]

  --address HOST:PORT       the server's gRPC address (default 127.0.0.1:9000)
  --prompt TEXT             a text prompt (the server needs a tokenizer)
  --prompt-ids 1,2,3        a prompt given as token ids
  --info                    print GetModelInfo and exit
  --stream                  use GenerateStream and print text as it arrives
  --max-tokens N            tokens to generate at most (default 16)
  --temperature T           0 = greedy (default 1)
  --top-p P, --top-k K, --min-p P, --seed S
  --stop STRING             stop before this string (one)
  --stop-token-ids 1,2      stop when one of these ids is sampled
  --ignore-eos              keep generating after the end-of-sequence token
  --logprobs                print each generated token's log-probability (stderr)
  --top-logprobs N          and its N most likely alternatives (0 to 20)
  --prompt-logprobs N       score the prompt: each token after the first with its
                            log-probability, rank and N alternatives (no cached prefix)
  --solver-tolerance T      CG tolerance for this request
  --solver-max-iterations M CG iteration cap for this request
  --cache-salt SALT         share cached prefixes only with requests of this salt
  --session-id ID           continue the saved session ID (only the new prompt is sent) and
                            save this request's final state under it
  --sessions                print ListSessions and exit
  --save-session ID, --load-session ID, --delete-session ID
                            SaveSession / LoadSession / DeleteSession, print the result, exit
  --timeout SECONDS         deadline of the call (default 600)
  --api-key KEY             sent as 'authorization: Bearer KEY' metadata (servers with keys)
  --tls-ca PATH             connect over TLS, trusting the CAs of this PEM file
  --tls-cert PATH           with --tls-ca: present this client certificate (PEM) and
  --tls-key PATH            its key, for servers that require one (--ssl-ca-certs)
)";

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_ERROR:
      return "error";
    default:
      return "unspecified";
  }
}

void PrintSolver(const char* phase, const v1::SolverStats& s) {
  std::fprintf(stderr, "  %s solver: %lld solves, mean %.2f / max %d iterations, %.1f%% capped\n",
               phase, static_cast<long long>(s.solves()), s.mean_iterations(), s.max_iterations(),
               100.0 * s.capped_fraction());
}

void PrintFinal(const v1::GenerateResponse& last) {
  const v1::Usage& u = last.usage();
  std::fprintf(stderr, "\nfinish: %s%s%s\n", FinishName(last.finish_reason()),
               last.finish_message().empty() ? "" : " ", last.finish_message().c_str());
  std::fprintf(stderr,
               "usage: %lld prompt (%lld cached) + %lld completion tokens; queue %.3f s, first "
               "token %.3f s, total %.3f s\n",
               static_cast<long long>(u.prompt_tokens()), static_cast<long long>(u.cached_tokens()),
               static_cast<long long>(u.completion_tokens()), u.queue_time_seconds(),
               u.time_to_first_token_seconds(), u.total_time_seconds());
  PrintSolver("prefill", u.prefill());
  PrintSolver("decode", u.decode());
}

void PrintTokenLogprob(const char* what, int position, const v1::TokenLogprob& lp) {
  std::fprintf(stderr, "  %s %d: id %d logprob %.6f", what, position, lp.token_id(), lp.logprob());
  if (lp.rank() > 0) std::fprintf(stderr, " rank %d", lp.rank());
  for (const v1::TopLogprob& top : lp.top()) {
    std::fprintf(stderr, " | %d %.6f", top.token_id(), top.logprob());
  }
  std::fprintf(stderr, "\n");
}

// The prompt's scores (from its second token) and the generated tokens' log-probabilities.
void PrintLogprobs(const v1::GenerateResponse& r) {
  if (r.prompt_logprobs_size() > 0)
    std::fprintf(stderr, "prompt logprobs (id logprob rank | top):\n");
  for (int i = 0; i < r.prompt_logprobs_size(); ++i) {
    PrintTokenLogprob("prompt token", i + 1, r.prompt_logprobs(i));
  }
  if (r.logprobs_size() > 0) std::fprintf(stderr, "logprobs (id logprob | top):\n");
  for (int i = 0; i < r.logprobs_size(); ++i) PrintTokenLogprob("token", i, r.logprobs(i));
}

// Text when the server sent any, else the ids.
void PrintDelta(const v1::GenerateResponse& r, bool have_text) {
  if (have_text) {
    std::fwrite(r.text().data(), 1, r.text().size(), stdout);
  } else if (r.token_ids_size() > 0) {
    std::printf("%s ", absl::StrJoin(r.token_ids(), " ").c_str());
  }
  std::fflush(stdout);
}

absl::StatusOr<std::string> ReadFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": cannot read"));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv,
                                                {"address",
                                                 "prompt",
                                                 "prompt-ids",
                                                 "info",
                                                 "stream",
                                                 "max-tokens",
                                                 "temperature",
                                                 "top-p",
                                                 "top-k",
                                                 "min-p",
                                                 "seed",
                                                 "stop",
                                                 "stop-token-ids",
                                                 "ignore-eos",
                                                 "logprobs",
                                                 "top-logprobs",
                                                 "prompt-logprobs",
                                                 "solver-tolerance",
                                                 "solver-max-iterations",
                                                 "timeout",
                                                 "api-key",
                                                 "tls-ca",
                                                 "tls-cert",
                                                 "tls-key",
                                                 "cache-salt",
                                                 "session-id",
                                                 "sessions",
                                                 "save-session",
                                                 "load-session",
                                                 "delete-session",
                                                 "help"},
                                                {"info", "stream", "sessions", "help", "ignore-eos",
                                                 "logprobs"}));
  if (args.Has("help")) {
    std::fputs(kUsage, stdout);
    return absl::OkStatus();
  }
  const std::string address = args.StringOr("address", "127.0.0.1:9000");
  ASSIGN_OR_RETURN(const double timeout, args.Double("timeout", 600));
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (args.Has("tls-ca")) {
    grpc::SslCredentialsOptions ssl;
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile("tls-ca", args.StringOr("tls-ca", "")));
    if (args.Has("tls-cert") != args.Has("tls-key")) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key: give both or neither");
    }
    if (args.Has("tls-cert")) {
      ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFile("tls-cert", args.StringOr("tls-cert", "")));
      ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFile("tls-key", args.StringOr("tls-key", "")));
    }
    credentials = grpc::SslCredentials(ssl);
  } else if (args.Has("tls-cert") || args.Has("tls-key")) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key need --tls-ca");
  }
  auto channel = grpc::CreateChannel(address, credentials);
  auto stub = v1::Generation::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
  const std::string authorization =
      args.Has("api-key") ? "Bearer " + args.StringOr("api-key", "") : std::string();
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);

  v1::ModelInfo info;
  {
    grpc::ClientContext info_context;
    info_context.set_deadline(context.deadline());
    if (!authorization.empty()) info_context.AddMetadata("authorization", authorization);
    grpc::Status s = stub->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info);
    if (!s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("GetModelInfo on ", address, ": ", s.error_message()));
    }
  }
  if (args.Has("info")) {
    std::printf("%s\n", info.DebugString().c_str());
    return absl::OkStatus();
  }
  if (args.Has("sessions")) {
    v1::ListSessionsResponse sessions;
    grpc::Status s = stub->ListSessions(&context, v1::ListSessionsRequest(), &sessions);
    if (!s.ok())
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    std::printf("%s\n", sessions.DebugString().c_str());
    return absl::OkStatus();
  }
  for (const char* method : {"save-session", "load-session", "delete-session"}) {
    if (!args.Has(method)) continue;
    v1::SessionRequest request;
    request.set_id(args.StringOr(method, ""));
    v1::SessionInfo session;
    const std::string name = method;
    grpc::Status s = name == "save-session"   ? stub->SaveSession(&context, request, &session)
                     : name == "load-session" ? stub->LoadSession(&context, request, &session)
                                              : stub->DeleteSession(&context, request, &session);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat(name, ": ", s.error_message()));
    }
    std::printf("%s\n", session.DebugString().c_str());
    return absl::OkStatus();
  }

  v1::GenerateRequest request;
  if (args.Has("prompt") == args.Has("prompt-ids")) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --prompt-ids");
  }
  if (args.Has("prompt")) {
    request.set_text(args.StringOr("prompt", ""));
  } else {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, args.IdList("prompt-ids"));
    request.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  }
  v1::SamplingParams* s = request.mutable_sampling();
  ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max-tokens", 16));
  s->set_max_tokens(static_cast<int32_t>(max_tokens));
  if (args.Has("temperature")) {
    ASSIGN_OR_RETURN(const double t, args.Double("temperature", 1));
    s->set_temperature(static_cast<float>(t));
  }
  if (args.Has("top-p")) {
    ASSIGN_OR_RETURN(const double p, args.Double("top-p", 1));
    s->set_top_p(static_cast<float>(p));
  }
  ASSIGN_OR_RETURN(const int64_t top_k, args.Int("top-k", 0));
  s->set_top_k(static_cast<int32_t>(top_k));
  ASSIGN_OR_RETURN(const double min_p, args.Double("min-p", 0));
  s->set_min_p(static_cast<float>(min_p));
  if (args.Has("seed")) {
    ASSIGN_OR_RETURN(const int64_t seed, args.Int("seed", 0));
    s->set_seed(static_cast<uint64_t>(seed));
  }
  if (args.Has("stop")) s->add_stop(args.StringOr("stop", ""));
  if (args.Has("stop-token-ids")) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, args.IdList("stop-token-ids"));
    s->mutable_stop_token_ids()->Assign(ids.begin(), ids.end());
  }
  s->set_ignore_eos(args.Has("ignore-eos"));
  s->set_logprobs(args.Has("logprobs"));
  ASSIGN_OR_RETURN(const int64_t top_logprobs, args.Int("top-logprobs", 0));
  s->set_top_logprobs(static_cast<int32_t>(top_logprobs));  // the server checks the range
  if (args.Has("prompt-logprobs")) {
    ASSIGN_OR_RETURN(const int64_t n, args.Int("prompt-logprobs", 0));
    request.set_prompt_logprobs(static_cast<int32_t>(n));
  }
  if (args.Has("solver-tolerance")) {
    ASSIGN_OR_RETURN(const double tol, args.Double("solver-tolerance", 0));
    request.mutable_solver()->set_tolerance(static_cast<float>(tol));
  }
  if (args.Has("solver-max-iterations")) {
    ASSIGN_OR_RETURN(const int64_t m, args.Int("solver-max-iterations", 30));
    request.mutable_solver()->set_max_iterations(static_cast<int32_t>(m));
  }
  request.set_cache_salt(args.StringOr("cache-salt", ""));
  request.set_session_id(args.StringOr("session-id", ""));

  const bool have_text = info.has_tokenizer();
  grpc::Status status;
  if (args.Has("stream")) {
    auto reader = stub->GenerateStream(&context, request);
    v1::GenerateResponse message;
    v1::GenerateResponse last;
    v1::GenerateResponse scores;  // every message's logprobs, in order
    while (reader->Read(&message)) {
      PrintDelta(message, have_text);
      scores.mutable_prompt_logprobs()->MergeFrom(message.prompt_logprobs());
      scores.mutable_logprobs()->MergeFrom(message.logprobs());
      if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = message;
    }
    status = reader->Finish();
    if (status.ok()) {
      PrintFinal(last);
      PrintLogprobs(scores);
    }
  } else {
    v1::GenerateResponse response;
    status = stub->Generate(&context, request, &response);
    if (status.ok()) {
      PrintDelta(response, have_text);
      PrintFinal(response);
      PrintLogprobs(response);
    }
  }
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("gRPC ", status.error_code(), ": ", status.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ridge

int main(int argc, char** argv) {
  const absl::Status status = ridge::Run(argc - 1, argv + 1);
  if (!status.ok()) {
    std::fprintf(stderr, "ridge_grpc_client: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
