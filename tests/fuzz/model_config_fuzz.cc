// libFuzzer target: config.json of each architecture (MesaNet, hybrid_qwen3). Any JSON must parse
// into a spec whose numbers are in range or give an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "models/arch/hybrid_qwen3_config.h"
#include "models/mesanet_config.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json json = nlohmann::json::parse(data, data + size, nullptr, false);
  if (json.is_discarded()) return 0;
  (void)ridge::ParseMesaNetConfig(json);
  const auto spec = ridge::ParseHybridQwen3Config(json);
  if (spec.ok()) {
    if (spec->layers.empty() || spec->hidden_size <= 0 || spec->vocab_size <= 0) std::abort();
    (void)spec->ParameterCount();
    (void)spec->LayerPattern();
    (void)ridge::PlanKvLayout(*spec, 16);
    (void)ridge::PlanRecurrentLayout(*spec);
  }
  return 0;
}
