// TLS for both transports, under vLLM's flag names: --ssl-certfile and --ssl-keyfile serve HTTPS
// and gRPC over TLS; --ssl-ca-certs also requires every client to present a certificate that CA
// signed (mutual TLS). The files are read and checked once, at start-up.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ridge {

struct TlsOptions {
  std::string cert_file, key_file, ca_file;  // paths; all empty: no TLS
  std::string cert_pem, key_pem, ca_pem;     // their contents (PEM)

  bool enabled() const { return !cert_file.empty(); }
  bool verify_clients() const { return !ca_file.empty(); }
};

// Reads the three files (cert_file and key_file both or neither; ca_file only with them). Each
// must be a readable PEM file of at most 1 MiB holding what its flag names; the key must be the
// certificate's. Any other case is InvalidArgument naming the flag and the file.
absl::StatusOr<TlsOptions> LoadTlsOptions(const std::string& cert_file, const std::string& key_file,
                                          const std::string& ca_file);

}  // namespace ridge
