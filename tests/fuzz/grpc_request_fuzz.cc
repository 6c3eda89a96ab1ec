// libFuzzer target: the bytes of a gRPC GenerateRequest, as the server receives them, through
// protobuf's parser and ParseGenerateRequest (server/grpc_conversion.h) against a model of 1000
// tokens and a prompt limit of 4096. Any input must give an engine request within the limits or
// an error naming the field, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "server/grpc_conversion.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ridgeserve::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  ridge::ServedModel model;
  model.name = "m";
  model.vocab_size = 1000;
  model.limits.max_prompt_tokens = 4096;
  model.limits.max_new_tokens = 4096;
  model.limits.max_solver_iterations = 100;
  const auto parsed = ridge::ParseGenerateRequest(request, model);
  if (parsed.ok()) {
    for (int32_t id : parsed->engine.prompt) {
      if (id < 0 || id >= 1000) std::abort();
    }
    if (parsed->engine.prompt.empty() || parsed->engine.prompt.size() > 4096) std::abort();
    if (parsed->engine.sampling.max_tokens < 1 || parsed->engine.sampling.max_tokens > 4096) {
      std::abort();
    }
  }
  return 0;
}
