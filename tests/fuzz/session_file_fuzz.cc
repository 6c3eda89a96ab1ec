// libFuzzer target: a saved session file (engine/session_file.h), read from a --session-dir.
// Every input must parse into a consistent session or give an error, never crash; a parsed one
// must serialize back to the same contents. Each input is tried as is and with a correct
// checksum appended, so mutations reach the header and the parts behind the checksum.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/sha256.h"
#include "engine/session_file.h"

namespace {

void Check(std::string_view bytes) {
  const auto session = ridge::ParseSessionFile(bytes);
  if (session.ok()) {
    for (const std::string& block : session->kv_blocks) {
      if (block.size() != session->kv_blocks[0].size()) std::abort();
    }
    const auto again = ridge::ParseSessionFile(ridge::SerializeSessionFile(*session));
    if (!again.ok() || again->tokens != session->tokens || again->state != session->state ||
        again->kv_blocks != session->kv_blocks || again->pending != session->pending) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes);
  const ridge::Sha256Digest digest = ridge::Sha256Of(bytes);
  std::string sealed(bytes);
  sealed.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  Check(sealed);
  return 0;
}
