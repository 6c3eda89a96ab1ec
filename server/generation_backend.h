// What the transports need from the engine, as an interface so the HTTP layer can be tested
// in-process against a scripted fake. EngineBackend forwards to the real ridge::Engine.
#pragma once

#include <memory>

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

 private:
  Engine* engine_;
};

}  // namespace ridge
