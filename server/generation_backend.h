// What the transports need from the engine, as an interface so the HTTP layer can be tested
// in-process against a scripted fake. EngineBackend forwards to the real ridge::Engine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/request.h"

namespace ridge {

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Errors as Engine::Submit: kInvalidArgument, kOutOfRange (prompt too long),
  // kResourceExhausted (queue full), kUnavailable (draining).
  virtual absl::StatusOr<RequestId> Submit(EngineRequest request,
                                           std::shared_ptr<RequestSink> sink) = 0;
  virtual void Cancel(RequestId id, CancelReason reason = CancelReason::kClient) = 0;
  virtual EngineSnapshot Snapshot() const = 0;
  // Saved sessions, as Engine's; the base has none and refuses the rest (kUnimplemented).
  virtual std::vector<SessionInfo> ListSessions() { return {}; }
  virtual absl::Status DeleteSession(const std::string& id) { return NoSessions(id); }
  virtual absl::StatusOr<SessionInfo> SaveSession(const std::string& id) { return NoSessions(id); }
  virtual absl::StatusOr<SessionInfo> LoadSession(const std::string& id) { return NoSessions(id); }

 private:
  static absl::Status NoSessions(const std::string& id) {
    return absl::UnimplementedError("this server keeps no sessions (session '" + id + "')");
  }
};

// Header-only so that only the binary that owns an Engine links the engine.
class EngineBackend final : public GenerationBackend {
 public:
  explicit EngineBackend(Engine* engine) : engine_(engine) {}
  absl::StatusOr<RequestId> Submit(EngineRequest request,
                                   std::shared_ptr<RequestSink> sink) override {
    return engine_->Submit(std::move(request), std::move(sink));
  }
  void Cancel(RequestId id, CancelReason reason = CancelReason::kClient) override {
    engine_->Cancel(id, reason);
  }
  EngineSnapshot Snapshot() const override { return engine_->Snapshot(); }
  std::vector<SessionInfo> ListSessions() override { return engine_->ListSessions(); }
  absl::Status DeleteSession(const std::string& id) override { return engine_->DeleteSession(id); }
  absl::StatusOr<SessionInfo> SaveSession(const std::string& id) override {
    return engine_->SaveSessionToDisk(id);
  }
  absl::StatusOr<SessionInfo> LoadSession(const std::string& id) override {
    return engine_->LoadSessionFromDisk(id);
  }

 private:
  Engine* engine_;
};

}  // namespace ridge
