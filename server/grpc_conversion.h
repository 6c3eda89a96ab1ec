// The gRPC API's messages (proto/ridgeserve/v1/generation.proto) translated to and from the
// engine's types, without any gRPC runtime: validation of a GenerateRequest into an
// EngineRequest, and engine events into GenerateResponse messages (incremental detokenization,
// stop strings). Kept apart from the service so it can be unit-tested without a server.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "ridgeserve/v1/generation.pb.h"
#include "server/json_output.h"
#include "server/output_assembler.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

namespace v1 = ::ridgeserve::v1;

inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;

// What a request is checked against.
struct ServedModel {
  std::string name;                      // GenerateRequest.model must be empty or equal this
  int64_t vocab_size = 0;                // the model's
  const Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  // For sampling.json_object (made from the tokenizer on first use); null: refused.
  std::shared_ptr<const LazyJsonVocabulary> json_vocabulary = nullptr;
  EngineOptions limits;  // the engine's limits and default solver budget
};

// A GenerateRequest, validated: the engine's part and what the transport handles itself.
struct ParsedGenerateRequest {
  EngineRequest engine;
  std::vector<std::string> stop;  // stop strings, matched on the decoded text
  bool skip_special_tokens = true;
};

// Errors name the proto field: INVALID_ARGUMENT for a bad value, OUT_OF_RANGE for a prompt over
// the limit, FAILED_PRECONDITION for text features without a tokenizer, NOT_FOUND for another
// model's name. The deadline is left unset (the transport knows it).
absl::StatusOr<ParsedGenerateRequest> ParseGenerateRequest(const v1::GenerateRequest& request,
                                                           const ServedModel& model);

// A wall-clock deadline (gRPC's) on the steady clock the engine uses; nullopt for "none"
// (time_point::max()).
std::optional<SteadyTime> ToSteadyDeadline(std::chrono::system_clock::time_point deadline,
                                           std::chrono::system_clock::time_point system_now,
                                           SteadyTime steady_now);

v1::FinishReason ToProto(FinishReason reason);
void ToProto(const SolverStats& stats, v1::SolverStats* out);
void ToProto(const RequestUsage& usage, v1::Usage* out);
void FillModelInfo(const ServedModel& model, const ModelSpec& spec, const EngineMemory& memory,
                   v1::ModelInfo* out);

// Whether a non-final message would carry anything.
inline bool HasContent(const v1::GenerateResponse& r) {
  return r.token_ids_size() > 0 || !r.text().empty() || r.prompt_logprobs_size() > 0;
}

// Turns one request's engine events into response messages. Text goes through an incremental
// decoder (never a broken UTF-8 character) and, with stop strings, is held back while it could
// still be the start of one. Not thread-safe: the caller serializes calls.
class GrpcResponseBuilder {
 public:
  // `tokenizer` may be null (no text; `stop` must then be empty).
  // Stop strings match from the min_tokens-th token's text on.
  GrpcResponseBuilder(const Tokenizer* tokenizer, bool skip_special_tokens,
                      std::vector<std::string> stop, int32_t min_tokens = 0);

  // Appends the event's tokens, logprobs and newly final text to *out. Returns true exactly once:
  // when a stop string has just matched. The caller must then cancel the request; tokens of this
  // and later events past the match are dropped.
  bool AddTokens(const RequestEvent& event, v1::GenerateResponse* out);

  // For the final event (after AddTokens of it): releases held-back text and sets finish reason,
  // finish message and usage. Returns the status the RPC ends with: OK, or the engine's error
  // (an ERROR finish, or a deadline that expired).
  absl::Status Finish(const RequestEvent& event, v1::GenerateResponse* out);

  bool stopped() const { return assembler_.stopped(); }

 private:
  // Text, stop strings and unknown ids are handled exactly as over HTTP.
  OutputAssembler assembler_;
};

}  // namespace ridge
