// The gRPC server of ridgeserve: service ridgeserve.v1.Generation (generation.proto) on the
// engine, plus grpc.health.v1.Health and server reflection. It runs beside the HTTP server in
// `ridgeserve serve`; this header carries no gRPC types so that the serve command compiles fast.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "server/api_keys.h"
#include "server/tls_options.h"
#include "tokenizer/tokenizer.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace ridge {

struct GrpcServerOptions {
  // host:port to listen on, e.g. "0.0.0.0:9000" or "127.0.0.1:0" (0: any free port; see port()).
  std::string address;
  // The name GetModelInfo reports and GenerateRequest.model may name.
  std::string model_name;
  int64_t max_message_bytes = 64 << 20;  // largest request accepted (token-id prompts are big)
  // Keys every Generation method requires as `authorization: Bearer <key>` metadata
  // (UNAUTHENTICATED otherwise); the health service stays open. No keys: all open.
  ApiKeys api_keys = {};
  TlsOptions tls = {};  // enabled: TLS only (and client certificates with a CA)
};

class GrpcServer {
 public:
  // Binds and starts serving on gRPC's own threads; health is SERVING. `engine` and `tokenizer`
  // (null: token-id prompts only) must outlive the server. Fails with UNAVAILABLE when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(Engine* engine,
                                                           const Tokenizer* tokenizer,
                                                           GrpcServerOptions options);
  ~GrpcServer();  // Shutdown(now) unless done already

  // The port actually bound (useful with port 0).
  int port() const { return port_; }

  // Health status of "" and "ridgeserve.v1.Generation": SERVING or NOT_SERVING. Call
  // SetServing(false) when draining, so load balancers stop sending new requests.
  void SetServing(bool serving);

  // Sets NOT_SERVING, stops accepting calls, lets running calls finish until `deadline`, then
  // cancels the rest (their engine requests are cancelled too) and waits for them. Idempotent.
  // Drain the engine (Engine::StartDrain / WaitIdle) before, so in-flight streams complete.
  void Shutdown(SteadyTime deadline);

  struct Service;  // the Generation service (grpc_service.cc)

 private:
  GrpcServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace ridge
