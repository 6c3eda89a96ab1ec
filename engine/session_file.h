// A saved session on disk: one sequence's state as its backend stores it (the state slot's bytes
// and its KV blocks'), the tokens it has consumed, and what it belongs to (a fingerprint of the
// model, the backend's storage format, the prefix cache's namespace). Layout:
//
//   "RIDGESES" | u32 version | u64 header length | header (JSON) | tokens (i32 LE) |
//   state bytes | KV blocks' bytes | SHA-256 of all that precedes
//
// ParseSessionFile checks the file's own consistency (magic, version, lengths, the header's
// fields, the hash of the tokens and of the whole file); whether it fits the running model is
// the engine's check.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ridge {

inline constexpr uint32_t kSessionFileVersion = 1;

struct SessionFile {
  std::string model_fingerprint;
  std::string state_format;                 // ModelBackend::state_format()
  std::string cache_space;                  // the prefix cache's namespace of its state
  std::vector<int32_t> tokens;              // those the state has consumed
  std::vector<int32_t> pending = {};        // generated after them, not yet fed (at most 16)
  std::string state;                        // the slot's bytes
  int64_t kv_block_size = 0;                // tokens per KV block (0: no KV cache)
  std::vector<std::string> kv_blocks = {};  // each block's bytes, all of one size
};

std::string SerializeSessionFile(const SessionFile& session);
absl::StatusOr<SessionFile> ParseSessionFile(std::string_view bytes);

}  // namespace ridge
