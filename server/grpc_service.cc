// The Generation service on gRPC's callback API. Each Generate/GenerateStream call is one reactor
// object that is also (through a small sink) the engine's RequestSink for its request. The engine
// thread never waits on the network: events are folded into a pending message under the call's
// mutex, and a single write is in flight at a time; OnWriteDone sends what accumulated meanwhile
// (so a slow client gets fewer, larger messages instead of stalling the engine).
//
// Lifetime: a call is referenced by gRPC (until OnDone) and, once submitted, by the engine (until
// the request's final event, which the engine delivers exactly once). It deletes itself when both
// are gone, so neither side can touch a dead object. gRPC operations (StartWrite, Finish) and
// Engine::Cancel are issued after the mutex is released, in case either reacts inline.
#include "server/grpc_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/logging.h"
#include "ridgeserve/v1/generation.grpc.pb.h"
#include "server/grpc_conversion.h"

namespace ridge {
namespace {

constexpr char kServiceName[] = "ridgeserve.v1.Generation";

// absl and gRPC both number their codes after google.rpc.Code.
grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// What a call decided under its mutex, done after releasing it.
struct Actions {
  std::optional<RequestId> cancel;  // Engine::Cancel
  CancelReason cancel_reason = CancelReason::kClient;
  const v1::GenerateResponse* write = nullptr;  // StartWrite (streams)
  std::optional<grpc::Status> finish;           // Finish
  bool destroy = false;                         // last reference gone
};

// State shared by the unary and the streaming call.
class CallBase {
 public:
  virtual ~CallBase() = default;

  // The engine thread delivers an event.
  void Deliver(RequestEvent event) {
    Actions actions;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (builder_.AddTokens(event, &pending_)) {  // a stop string matched
        actions.cancel = event.id;
        actions.cancel_reason = CancelReason::kStopString;
      }
      if (event.finished) {
        engine_done_ = true;
        final_status_ = ToGrpc(builder_.Finish(event, &pending_));
        final_ready_ = true;
        actions.destroy = --refs_ == 0;
      }
      if (!finish_called_) OnContentLocked(&actions);
    }
    Perform(actions);
  }

 protected:
  CallBase(Engine* engine, GrpcResponseBuilder builder)
      : engine_(engine), builder_(std::move(builder)) {}

  // Submits the request from the reactor's constructor. A failure finishes the call with the
  // engine's code (RESOURCE_EXHAUSTED, UNAVAILABLE, OUT_OF_RANGE, INVALID_ARGUMENT).
  void Submit(EngineRequest request, std::function<void(const grpc::Status&)> finish);

  // With mu_ held and the RPC not finished: decide writes / Finish for what is pending.
  virtual void OnContentLocked(Actions* actions) = 0;
  virtual void DoWrite(const v1::GenerateResponse* message) = 0;
  virtual void DoFinish(const grpc::Status& status) = 0;
  virtual bool WritingLocked() const { return false; }

  // gRPC cancelled the call (client cancel, deadline, disconnect, server shutdown).
  void HandleCancel() {
    Actions actions;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (submitted_ && !engine_done_) actions.cancel = id_;
      cancelled_ = true;
      // A write in flight completes first; OnWriteDone finishes then.
      if (!finish_called_ && !WritingLocked()) {
        finish_called_ = true;
        actions.finish = grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
      }
    }
    Perform(actions);
  }

  void HandleDone() {
    bool destroy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      destroy = --refs_ == 0;
    }
    if (destroy) delete this;
  }

  void Perform(const Actions& actions) {
    if (actions.cancel) engine_->Cancel(*actions.cancel, actions.cancel_reason);
    if (actions.write) DoWrite(actions.write);
    if (actions.finish) DoFinish(*actions.finish);
    if (actions.destroy) delete this;
  }

  Engine* const engine_;
  std::mutex mu_;
  int refs_ = 1;  // gRPC's, until OnDone; +1 for the engine while its request runs
  GrpcResponseBuilder builder_;
  v1::GenerateResponse pending_;  // accumulated, not yet written
  bool submitted_ = false;
  RequestId id_ = 0;
  bool engine_done_ = false;
  bool final_ready_ = false;  // the final event has been folded into pending_
  grpc::Status final_status_;
  bool cancelled_ = false;
  bool finish_called_ = false;
};

class CallSink final : public RequestSink {
 public:
  explicit CallSink(CallBase* call) : call_(call) {}
  void OnEvent(RequestEvent event) override { call_->Deliver(std::move(event)); }

 private:
  CallBase* call_;  // alive until its final event (it holds a reference for the engine)
};

void CallBase::Submit(EngineRequest request, std::function<void(const grpc::Status&)> finish) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++refs_;  // events may arrive before Submit returns
  }
  absl::StatusOr<RequestId> id =
      engine_->Submit(std::move(request), std::make_shared<CallSink>(this));
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!id.ok()) {
      --refs_;  // no event will come
      finish_called_ = true;
    } else {
      submitted_ = true;
      id_ = *id;
      cancel = cancelled_ && !engine_done_;
    }
  }
  if (!id.ok()) {
    finish(ToGrpc(id.status()));
  } else if (cancel) {
    engine_->Cancel(*id);
  }
}

// Generate: everything merged into one response.
class UnaryCall final : public grpc::ServerUnaryReactor, public CallBase {
 public:
  UnaryCall(Engine* engine, ParsedGenerateRequest parsed, const Tokenizer* tokenizer,
            v1::GenerateResponse* response)
      : CallBase(engine, GrpcResponseBuilder(tokenizer, parsed.skip_special_tokens,
                                             std::move(parsed.stop))),
        response_(response) {
    Submit(std::move(parsed.engine), [this](const grpc::Status& s) { Finish(s); });
  }

  void OnCancel() override { HandleCancel(); }
  void OnDone() override { HandleDone(); }

 private:
  void OnContentLocked(Actions* actions) override {
    if (!final_ready_) return;
    *response_ = std::move(pending_);
    finish_called_ = true;
    actions->finish = final_status_;
  }
  void DoWrite(const v1::GenerateResponse*) override { RIDGE_CHECK(false); }
  void DoFinish(const grpc::Status& status) override { Finish(status); }

  v1::GenerateResponse* response_;
};

// GenerateStream: one message per batch of events, one write in flight.
class StreamCall final : public grpc::ServerWriteReactor<v1::GenerateResponse>, public CallBase {
 public:
  StreamCall(Engine* engine, ParsedGenerateRequest parsed, const Tokenizer* tokenizer)
      : CallBase(engine, GrpcResponseBuilder(tokenizer, parsed.skip_special_tokens,
                                             std::move(parsed.stop))) {
    Submit(std::move(parsed.engine), [this](const grpc::Status& s) { Finish(s); });
  }

  void OnWriteDone(bool ok) override {
    Actions actions;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok || cancelled_) {
        // The stream broke (client gone or call cancelled): stop generating.
        if (submitted_ && !engine_done_) actions.cancel = id_;
        if (!finish_called_) {
          finish_called_ = true;
          actions.finish = grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed");
        }
      } else if (wrote_final_) {
        finish_called_ = true;
        actions.finish = final_status_;
      } else if (!finish_called_) {
        OnContentLocked(&actions);
      }
    }
    Perform(actions);
  }

  void OnCancel() override { HandleCancel(); }
  void OnDone() override { HandleDone(); }

 private:
  void OnContentLocked(Actions* actions) override {
    if (writing_ || cancelled_) return;
    if (!HasContent(pending_) && !final_ready_) return;
    in_flight_ = std::move(pending_);
    pending_.Clear();
    writing_ = true;
    wrote_final_ = final_ready_;
    actions->write = &in_flight_;
  }
  void DoWrite(const v1::GenerateResponse* message) override { StartWrite(message); }
  bool WritingLocked() const override { return writing_; }
  void DoFinish(const grpc::Status& status) override { Finish(status); }

  v1::GenerateResponse in_flight_;  // owned by the write in flight
  bool writing_ = false;
  bool wrote_final_ = false;
};

}  // namespace

struct GrpcServer::Service final : public v1::Generation::CallbackService {
  Service(Engine* engine, ServedModel model, ApiKeys keys)
      : engine(engine), model(std::move(model)), keys(std::move(keys)) {}

  // OK when the call's metadata carries an accepted key (or no keys are configured).
  absl::Status Authorize(const grpc::CallbackServerContext& context) const {
    if (!keys.enabled()) return absl::OkStatus();
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find("authorization");
    if (it != metadata.end() &&
        keys.Accepts(std::string_view(it->second.data(), it->second.size()))) {
      return absl::OkStatus();
    }
    return absl::UnauthenticatedError(
        "a valid API key is required: send it as 'authorization: Bearer <key>' metadata");
  }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    absl::StatusOr<ParsedGenerateRequest> parsed = Parse(*request, *context);
    if (!parsed.ok()) return FinishNow(context, parsed.status());
    return new UnaryCall(engine, *std::move(parsed), model.tokenizer, response);
  }

  grpc::ServerWriteReactor<v1::GenerateResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override {
    const absl::Status auth = Authorize(*context);
    absl::StatusOr<ParsedGenerateRequest> parsed =
        auth.ok() ? Parse(*request, *context) : absl::StatusOr<ParsedGenerateRequest>(auth);
    if (!parsed.ok()) {
      // A reactor that finishes at once.
      class Failed final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
       public:
        explicit Failed(const grpc::Status& s) { Finish(s); }
        void OnDone() override { delete this; }
      };
      return new Failed(ToGrpc(parsed.status()));
    }
    return new StreamCall(engine, *std::move(parsed), model.tokenizer);
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    if (model.tokenizer == nullptr) return FinishNow(context, NoTokenizer("Tokenize"));
    absl::StatusOr<std::vector<int32_t>> ids = model.tokenizer->Encode(
        request->text(), request->has_add_special_tokens() ? request->add_special_tokens() : true);
    if (!ids.ok()) return FinishNow(context, ids.status());
    response->mutable_token_ids()->Assign(ids->begin(), ids->end());
    return FinishNow(context, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    if (model.tokenizer == nullptr) return FinishNow(context, NoTokenizer("Detokenize"));
    const std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
    absl::StatusOr<std::string> text = model.tokenizer->Decode(
        ids, request->has_skip_special_tokens() ? request->skip_special_tokens() : true);
    if (!text.ok()) return FinishNow(context, text.status());
    response->set_text(*std::move(text));
    return FinishNow(context, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest*,
                                         v1::ModelInfo* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    FillModelInfo(model, engine->spec(), engine->memory(), response);
    return FinishNow(context, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest*,
                                         v1::ListSessionsResponse* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    return FinishLater(context, [this, response] {
      for (const SessionInfo& s : engine->ListSessions()) ToProto(s, response->add_sessions());
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const v1::SessionRequest* request,
                                          v1::SessionInfo* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    return FinishLater(context, [this, request, response] {
      const absl::Status status = engine->DeleteSession(request->id());
      if (status.ok()) response->set_id(request->id());
      return status;
    });
  }

  grpc::ServerUnaryReactor* SaveSession(grpc::CallbackServerContext* context,
                                        const v1::SessionRequest* request,
                                        v1::SessionInfo* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    return FinishLater(context, [this, request, response] {
      return Fill(engine->SaveSessionToDisk(request->id()), response);
    });
  }

  grpc::ServerUnaryReactor* LoadSession(grpc::CallbackServerContext* context,
                                        const v1::SessionRequest* request,
                                        v1::SessionInfo* response) override {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    return FinishLater(context, [this, request, response] {
      return Fill(engine->LoadSessionFromDisk(request->id()), response);
    });
  }

  static void ToProto(const SessionInfo& s, v1::SessionInfo* out) {
    out->set_id(s.id);
    out->set_tokens(s.tokens);
    out->set_in_use(s.in_use);
    out->set_path(s.path);
  }

  static absl::Status Fill(const absl::StatusOr<SessionInfo>& result, v1::SessionInfo* response) {
    if (result.ok()) ToProto(*result, response);
    return result.status();
  }

  // Session calls wait for the engine thread and may read or write large files: they run on a
  // thread of their own, not on gRPC's callback threads, and finish the call from there.
  static grpc::ServerUnaryReactor* FinishLater(grpc::CallbackServerContext* context,
                                               std::function<absl::Status()> work) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    std::thread([reactor, work = std::move(work)] { reactor->Finish(ToGrpc(work())); }).detach();
    return reactor;
  }

  absl::StatusOr<ParsedGenerateRequest> Parse(const v1::GenerateRequest& request,
                                              const grpc::CallbackServerContext& context) const {
    absl::StatusOr<ParsedGenerateRequest> parsed = ParseGenerateRequest(request, model);
    if (parsed.ok()) {
      parsed->engine.deadline = ToSteadyDeadline(
          context.deadline(), std::chrono::system_clock::now(), std::chrono::steady_clock::now());
    }
    return parsed;
  }

  absl::Status NoTokenizer(const char* method) const {
    return absl::FailedPreconditionError(
        absl::StrCat(method, " needs a tokenizer, and model '", model.name,
                     "' was loaded without one (no tokenizer.json in its folder)"));
  }

  // Finishes a unary call at once with `status` (OK included).
  static grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                             const absl::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpc(status));
    return reactor;
  }

  Engine* const engine;
  const ServedModel model;
  const ApiKeys keys;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Engine* engine,
                                                              const Tokenizer* tokenizer,
                                                              GrpcServerOptions options) {
  RIDGE_CHECK(engine != nullptr);
  ServedModel model;
  model.name = options.model_name;
  model.vocab_size = engine->spec().vocab_size;
  model.tokenizer = tokenizer;
  model.limits = engine->options();

  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->service_ =
      std::make_unique<Service>(engine, std::move(model), std::move(options.api_keys));

  // Process-wide switches; both must precede building the server.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options.tls.enabled()) {
    grpc::SslServerCredentialsOptions ssl(
        options.tls.verify_clients() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                     : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = options.tls.ca_pem;
    ssl.pem_key_cert_pairs.push_back({options.tls.key_pem, options.tls.cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(options.address, credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  // gRPC sets SO_REUSEPORT by default: a second server on a taken port would start and silently
  // share the traffic. Fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("gRPC: cannot listen on '", options.address,
                     "' (port in use, or not host:port; try --grpc-port with another port)"));
  }
  server->SetServing(true);
  Log(LogLevel::kInfo, "gRPC: serving ", kServiceName, " on ", options.address, " (port ",
      server->port_, options.tls.enabled() ? ", TLS" : "",
      options.tls.verify_clients() ? " with client certificates" : "", ")");
  return server;
}

void GrpcServer::SetServing(bool serving) {
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);  // every service, "" included
  health->SetServingStatus(kServiceName, serving);
}

void GrpcServer::Shutdown(SteadyTime deadline) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  SetServing(false);
  const auto remaining = deadline - std::chrono::steady_clock::now();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(remaining));
  server_->Wait();
}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::steady_clock::now()); }

}  // namespace ridge
