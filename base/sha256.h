// SHA-256 (OpenSSL's), for checksums of saved sessions and model fingerprints.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ridge {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view bytes);
  Sha256Digest Finish();  // once

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

Sha256Digest Sha256Of(std::string_view bytes);
std::string HexDigest(const Sha256Digest& digest);  // 64 lowercase hex digits

}  // namespace ridge
