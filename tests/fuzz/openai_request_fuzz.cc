// libFuzzer target: the body of POST /v1/completions and /v1/chat/completions. Any JSON must give
// a request within the limits or an error, never a crash.
#include <cstddef>
#include <cstdint>

#include "nlohmann/json.hpp"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json body = nlohmann::json::parse(data, data + size, nullptr, false);
  if (body.is_discarded()) return 0;
  ridge::RequestLimits limits;
  limits.vocab_size = 1000;
  (void)ridge::ParseOpenAiRequest(body, ridge::ApiKind::kCompletion, limits);
  (void)ridge::ParseOpenAiRequest(body, ridge::ApiKind::kChat, limits);
  return 0;
}
