#include "base/sha256.h"

#include <openssl/evp.h>

#include "base/check.h"

namespace ridge {

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
};

Sha256::Sha256() : context_(std::make_unique<Context>()) {
  context_->md = EVP_MD_CTX_new();
  RIDGE_CHECK(context_->md != nullptr && EVP_DigestInit_ex(context_->md, EVP_sha256(), nullptr));
}

Sha256::~Sha256() { EVP_MD_CTX_free(context_->md); }

void Sha256::Update(std::string_view bytes) {
  RIDGE_CHECK(EVP_DigestUpdate(context_->md, bytes.data(), bytes.size()));
}

Sha256Digest Sha256::Finish() {
  Sha256Digest digest{};
  unsigned int length = 0;
  RIDGE_CHECK(EVP_DigestFinal_ex(context_->md, digest.data(), &length) && length == 32);
  return digest;
}

Sha256Digest Sha256Of(std::string_view bytes) {
  Sha256 sha;
  sha.Update(bytes);
  return sha.Finish();
}

std::string HexDigest(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace ridge
