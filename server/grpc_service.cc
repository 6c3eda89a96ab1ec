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
//
// Every method is registered raw (bytes in, bytes out) and parses its request itself: gRPC's
// callback API answers a request that does not parse with UNIMPLEMENTED and no message, where
// the client deserves INVALID_ARGUMENT saying what is wrong.
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
#include "google/protobuf/stubs/logging.h"
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

// A request's bytes as message `M`; INVALID_ARGUMENT naming the message when they are not one
// (truncated, a wrong wire type, a string field that is not UTF-8).
template <typename M>
absl::StatusOr<M> ParseRaw(const grpc::ByteBuffer& bytes) {
  std::vector<grpc::Slice> slices;
  std::string flat;
  if (bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  M message;
  if (!message.ParseFromString(flat)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request is not a valid ", M::descriptor()->full_name(), " (", flat.size(),
        " bytes that do not parse as its protobuf wire format, or a string field that is not "
        "UTF-8); build the client from proto/ridgeserve/v1/generation.proto"));
  }
  return message;
}

void SerializeRaw(const google::protobuf::MessageLite& message, grpc::ByteBuffer* out) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  *out = grpc::ByteBuffer(&slice, 1);
}

// Protobuf logs each string field that is not UTF-8 as an error on stderr: a client could fill
// the log. Its messages go to ours at debug level (the caller gets INVALID_ARGUMENT anyway).
void RouteProtobufLogs() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char* file, int line, const std::string& text) {
        Log(level == google::protobuf::LOGLEVEL_FATAL ? LogLevel::kError : LogLevel::kDebug,
            "protobuf (", file, ":", line, "): ", text);
      });
}

// What a call decided under its mutex, done after releasing it.
struct Actions {
  std::optional<RequestId> cancel;  // Engine::Cancel
  CancelReason cancel_reason = CancelReason::kClient;
  const grpc::ByteBuffer* write = nullptr;  // StartWrite (streams)
  std::optional<grpc::Status> finish;       // Finish
  bool destroy = false;                     // last reference gone
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
  virtual void DoWrite(const grpc::ByteBuffer* message) = 0;
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
            grpc::ByteBuffer* response)
      : CallBase(engine,
                 GrpcResponseBuilder(tokenizer, parsed.skip_special_tokens, std::move(parsed.stop),
                                     parsed.engine.sampling.min_tokens)),
        response_(response) {
    Submit(std::move(parsed.engine), [this](const grpc::Status& s) { Finish(s); });
  }

  void OnCancel() override { HandleCancel(); }
  void OnDone() override { HandleDone(); }

 private:
  void OnContentLocked(Actions* actions) override {
    if (!final_ready_) return;
    SerializeRaw(pending_, response_);
    finish_called_ = true;
    actions->finish = final_status_;
  }
  void DoWrite(const grpc::ByteBuffer*) override { RIDGE_CHECK(false); }
  void DoFinish(const grpc::Status& status) override { Finish(status); }

  grpc::ByteBuffer* response_;
};

// GenerateStream: one message per batch of events, one write in flight.
class StreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public CallBase {
 public:
  StreamCall(Engine* engine, ParsedGenerateRequest parsed, const Tokenizer* tokenizer)
      : CallBase(engine,
                 GrpcResponseBuilder(tokenizer, parsed.skip_special_tokens, std::move(parsed.stop),
                                     parsed.engine.sampling.min_tokens)) {
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
    SerializeRaw(pending_, &in_flight_);
    pending_.Clear();
    writing_ = true;
    wrote_final_ = final_ready_;
    actions->write = &in_flight_;
  }
  void DoWrite(const grpc::ByteBuffer* message) override { StartWrite(message); }
  bool WritingLocked() const override { return writing_; }
  void DoFinish(const grpc::Status& status) override { Finish(status); }

  grpc::ByteBuffer in_flight_;  // owned by the write in flight
  bool writing_ = false;
  bool wrote_final_ = false;
};

// Every method raw (see the top of this file).
using RawGenerationService = v1::Generation::WithRawCallbackMethod_Generate<
    v1::Generation::WithRawCallbackMethod_GenerateStream<
        v1::Generation::WithRawCallbackMethod_Tokenize<
            v1::Generation::WithRawCallbackMethod_Detokenize<
                v1::Generation::WithRawCallbackMethod_GetModelInfo<
                    v1::Generation::WithRawCallbackMethod_ListSessions<
                        v1::Generation::WithRawCallbackMethod_DeleteSession<
                            v1::Generation::WithRawCallbackMethod_SaveSession<
                                v1::Generation::WithRawCallbackMethod_LoadSession<
                                    v1::Generation::Service>>>>>>>>>;

}  // namespace

struct GrpcServer::Service final : public RawGenerationService {
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

  // The key checked, then the request parsed: a GenerateRequest ready for the engine.
  absl::StatusOr<ParsedGenerateRequest> Admit(const grpc::CallbackServerContext& context,
                                              const grpc::ByteBuffer& bytes) const {
    if (absl::Status auth = Authorize(context); !auth.ok()) return auth;
    absl::StatusOr<v1::GenerateRequest> request = ParseRaw<v1::GenerateRequest>(bytes);
    if (!request.ok()) return request.status();
    absl::StatusOr<ParsedGenerateRequest> parsed = ParseGenerateRequest(*request, model);
    if (parsed.ok()) {
      parsed->engine.deadline = ToSteadyDeadline(
          context.deadline(), std::chrono::system_clock::now(), std::chrono::steady_clock::now());
    }
    return parsed;
  }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override {
    absl::StatusOr<ParsedGenerateRequest> parsed = Admit(*context, *request);
    if (!parsed.ok()) return FinishNow(context, parsed.status());
    return new UnaryCall(engine, *std::move(parsed), model.tokenizer, response);
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateStream(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override {
    absl::StatusOr<ParsedGenerateRequest> parsed = Admit(*context, *request);
    if (!parsed.ok()) {
      // A reactor that finishes at once.
      class Failed final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
       public:
        explicit Failed(const grpc::Status& s) { Finish(s); }
        void OnDone() override { delete this; }
      };
      return new Failed(ToGrpc(parsed.status()));
    }
    return new StreamCall(engine, *std::move(parsed), model.tokenizer);
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override {
    return Unary<v1::TokenizeRequest, v1::TokenizeResponse>(
        context, request, response,
        [this](const v1::TokenizeRequest& in, v1::TokenizeResponse* out) -> absl::Status {
          if (model.tokenizer == nullptr) return NoTokenizer("Tokenize");
          absl::StatusOr<std::vector<int32_t>> ids = model.tokenizer->Encode(
              in.text(), in.has_add_special_tokens() ? in.add_special_tokens() : true);
          if (!ids.ok()) return ids.status();
          out->mutable_token_ids()->Assign(ids->begin(), ids->end());
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override {
    return Unary<v1::DetokenizeRequest, v1::DetokenizeResponse>(
        context, request, response,
        [this](const v1::DetokenizeRequest& in, v1::DetokenizeResponse* out) -> absl::Status {
          if (model.tokenizer == nullptr) return NoTokenizer("Detokenize");
          const std::vector<int32_t> ids(in.token_ids().begin(), in.token_ids().end());
          absl::StatusOr<std::string> text = model.tokenizer->Decode(
              ids, in.has_skip_special_tokens() ? in.skip_special_tokens() : true);
          if (!text.ok()) return text.status();
          out->set_text(*std::move(text));
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override {
    return Unary<v1::GetModelInfoRequest, v1::ModelInfo>(
        context, request, response, [this](const v1::GetModelInfoRequest&, v1::ModelInfo* out) {
          FillModelInfo(model, engine->spec(), engine->memory(), out);
          return absl::OkStatus();
        });
  }

  // Session calls wait for the engine thread and may read or write large files: they run on a
  // thread of their own, not on gRPC's callback threads (`later`).
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override {
    return Unary<v1::ListSessionsRequest, v1::ListSessionsResponse>(
        context, request, response,
        [this](const v1::ListSessionsRequest&, v1::ListSessionsResponse* out) {
          for (const SessionInfo& s : engine->ListSessions()) ToProto(s, out->add_sessions());
          return absl::OkStatus();
        },
        /*later=*/true);
  }

  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override {
    return Unary<v1::SessionRequest, v1::SessionInfo>(
        context, request, response,
        [this](const v1::SessionRequest& in, v1::SessionInfo* out) {
          const absl::Status status = engine->DeleteSession(in.id());
          if (status.ok()) out->set_id(in.id());
          return status;
        },
        /*later=*/true);
  }

  grpc::ServerUnaryReactor* SaveSession(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override {
    return Unary<v1::SessionRequest, v1::SessionInfo>(
        context, request, response,
        [this](const v1::SessionRequest& in, v1::SessionInfo* out) {
          return Fill(engine->SaveSessionToDisk(in.id()), out);
        },
        /*later=*/true);
  }

  grpc::ServerUnaryReactor* LoadSession(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override {
    return Unary<v1::SessionRequest, v1::SessionInfo>(
        context, request, response,
        [this](const v1::SessionRequest& in, v1::SessionInfo* out) {
          return Fill(engine->LoadSessionFromDisk(in.id()), out);
        },
        /*later=*/true);
  }

  // A unary method other than Generate: the key checked, the request parsed, `work` run (on a
  // thread of its own when `later`), its response serialized and the call finished.
  template <typename Request, typename Response, typename Work>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                  Work work, bool later = false) {
    if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
    absl::StatusOr<Request> parsed = ParseRaw<Request>(*request);
    if (!parsed.ok()) return FinishNow(context, parsed.status());
    auto run = [work = std::move(work), in = *std::move(parsed), response]() {
      Response out;
      const absl::Status status = work(in, &out);
      if (status.ok()) SerializeRaw(out, response);
      return status;
    };
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (!later) {
      reactor->Finish(ToGrpc(run()));
    } else {
      std::thread([reactor, run = std::move(run)] { reactor->Finish(ToGrpc(run())); }).detach();
    }
    return reactor;
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
  if (tokenizer != nullptr) {
    model.json_vocabulary = std::make_shared<const LazyJsonVocabulary>(
        tokenizer, static_cast<int32_t>(model.vocab_size));
  }

  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->service_ =
      std::make_unique<Service>(engine, std::move(model), std::move(options.api_keys));

  // Process-wide switches; both must precede building the server.
  RouteProtobufLogs();
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
