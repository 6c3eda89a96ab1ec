#include "server/tls_options.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path,
                                    const char* must_hold) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": cannot read"));
  std::string text;
  text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (text.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": larger than ", kMaxPemBytes, " bytes"));
  }
  if (text.find("-----BEGIN ") == std::string::npos || text.find(must_hold) == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": not a PEM file holding ", must_hold));
  }
  return text;
}

// OpenSSL's last error, for a message.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "no detail";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& text) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The certificate parses, the key parses, and the key is the certificate's.
absl::Status CheckPair(const TlsOptions& tls) {
  auto cert_bio = MemoryBio(tls.cert_pem);
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ssl-certfile ", tls.cert_file, ": not a valid certificate (", OpenSslError(), ")"));
  }
  auto key_bio = MemoryBio(tls.key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--ssl-keyfile ", tls.key_file,
                                                   ": not a valid unencrypted private key (",
                                                   OpenSslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--ssl-keyfile ", tls.key_file,
                                                   " is not the key of the certificate in "
                                                   "--ssl-certfile ",
                                                   tls.cert_file));
  }
  if (tls.verify_clients()) {
    auto ca_bio = MemoryBio(tls.ca_pem);
    std::unique_ptr<X509, X509Free> ca(PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr));
    if (ca == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ssl-ca-certs ", tls.ca_file, ": not a valid certificate (", OpenSslError(), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TlsOptions> LoadTlsOptions(const std::string& cert_file, const std::string& key_file,
                                          const std::string& ca_file) {
  TlsOptions tls;
  if (cert_file.empty() && key_file.empty()) {
    if (!ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--ssl-ca-certs needs --ssl-certfile and --ssl-keyfile (the server's own certificate)");
    }
    return tls;
  }
  if (cert_file.empty() || key_file.empty()) {
    return absl::InvalidArgumentError("--ssl-certfile and --ssl-keyfile: give both or neither");
  }
  tls.cert_file = cert_file;
  tls.key_file = key_file;
  tls.ca_file = ca_file;
  ASSIGN_OR_RETURN(tls.cert_pem, ReadPem("ssl-certfile", cert_file, "CERTIFICATE"));
  ASSIGN_OR_RETURN(tls.key_pem, ReadPem("ssl-keyfile", key_file, "PRIVATE KEY"));
  if (!ca_file.empty()) {
    ASSIGN_OR_RETURN(tls.ca_pem, ReadPem("ssl-ca-certs", ca_file, "CERTIFICATE"));
  }
  RETURN_IF_ERROR(CheckPair(tls));
  return tls;
}

}  // namespace ridge
