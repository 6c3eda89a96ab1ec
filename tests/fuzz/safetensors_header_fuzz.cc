// libFuzzer target: a safetensors header (the JSON after the 8-byte length) against a payload of
// 4096 bytes. Every input must give tensors inside the payload or an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "models/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::byte payload[4096];
  const std::string_view header(reinterpret_cast<const char*>(data), size);
  const auto tensors = ridge::ParseSafetensorsHeader(header, payload, sizeof(payload));
  if (tensors.ok()) {
    for (const ridge::TensorView& t : *tensors) {
      // In the payload, and of the bytes its dtype and shape need.
      if (t.data < payload || t.data + t.num_bytes > payload + sizeof(payload)) std::abort();
      if (static_cast<size_t>(t.NumElements()) * ridge::DTypeSize(t.dtype) != t.num_bytes) {
        std::abort();
      }
    }
  }
  return 0;
}
