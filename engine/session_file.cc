#include "engine/session_file.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "nlohmann/json.hpp"

namespace ridge {
namespace {

constexpr char kMagic[8] = {'R', 'I', 'D', 'G', 'E', 'S', 'E', 'S'};
constexpr size_t kDigestBytes = 32;
// Bounds that keep a corrupt header from asking for absurd allocations.
constexpr int64_t kMaxHeaderBytes = 1 << 20;
constexpr int64_t kMaxPositions = int64_t{1} << 30;
constexpr int64_t kMaxPartBytes = int64_t{1} << 40;

template <typename T>
void Append(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
T Read(std::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

std::string_view TokenBytes(const std::vector<int32_t>& tokens) {
  return {reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int32_t)};
}

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("the session file is damaged or not one: ", what));
}

// An integer header field within [0, max].
absl::StatusOr<int64_t> Count(const nlohmann::json& header, const char* field, int64_t max) {
  const auto it = header.find(field);
  if (it == header.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
      it->get<int64_t>() > max) {
    return Corrupt(absl::StrCat("header field '", field, "' is missing or out of range"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<std::string> Text(const nlohmann::json& header, const char* field) {
  const auto it = header.find(field);
  if (it == header.end() || !it->is_string()) {
    return Corrupt(absl::StrCat("header field '", field, "' is missing"));
  }
  return it->get<std::string>();
}

}  // namespace

std::string SerializeSessionFile(const SessionFile& s) {
  const int64_t block_bytes = s.kv_blocks.empty() ? 0 : s.kv_blocks[0].size();
  const nlohmann::json header = {{"model_fingerprint", s.model_fingerprint},
                                 {"state_format", s.state_format},
                                 {"cache_space", s.cache_space},
                                 {"position", s.tokens.size()},
                                 {"pending", s.pending},
                                 {"tokens_sha256", HexDigest(Sha256Of(TokenBytes(s.tokens)))},
                                 {"state_bytes", s.state.size()},
                                 {"kv_block_size", s.kv_block_size},
                                 {"kv_blocks", s.kv_blocks.size()},
                                 {"kv_block_bytes", block_bytes}};
  const std::string header_text = header.dump();
  std::string out(kMagic, sizeof(kMagic));
  Append<uint32_t>(out, kSessionFileVersion);
  Append<uint64_t>(out, header_text.size());
  out += header_text;
  out += TokenBytes(s.tokens);
  out += s.state;
  for (const std::string& block : s.kv_blocks) out += block;
  const Sha256Digest digest = Sha256Of(out);
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return out;
}

absl::StatusOr<SessionFile> ParseSessionFile(std::string_view bytes) {
  constexpr size_t kFixed = sizeof(kMagic) + sizeof(uint32_t) + sizeof(uint64_t);
  if (bytes.size() < kFixed + kDigestBytes || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return Corrupt("it does not start with RIDGESES");
  }
  const uint32_t version = Read<uint32_t>(bytes, 8);
  if (version != kSessionFileVersion) {
    return absl::FailedPreconditionError(absl::StrCat("the session file has format version ",
                                                      version, "; this server reads version ",
                                                      kSessionFileVersion));
  }
  const std::string_view body = bytes.substr(0, bytes.size() - kDigestBytes);
  const Sha256Digest digest = Sha256Of(body);
  if (std::memcmp(digest.data(), bytes.data() + body.size(), kDigestBytes) != 0) {
    return Corrupt("its checksum does not match its contents (truncated or altered)");
  }
  const uint64_t header_length = Read<uint64_t>(bytes, 12);
  if (header_length > static_cast<uint64_t>(kMaxHeaderBytes) ||
      header_length > body.size() - kFixed) {
    return Corrupt("its header length is out of range");
  }
  const nlohmann::json header = nlohmann::json::parse(body.substr(kFixed, header_length), nullptr,
                                                      /*allow_exceptions=*/false);
  if (!header.is_object()) return Corrupt("its header is not a JSON object");
  SessionFile s;
  auto text = [&](const char* field, std::string* out) -> absl::Status {
    absl::StatusOr<std::string> value = Text(header, field);
    if (!value.ok()) return value.status();
    *out = std::move(*value);
    return absl::OkStatus();
  };
  for (auto [field, out] :
       {std::pair{"model_fingerprint", &s.model_fingerprint},
        std::pair{"state_format", &s.state_format}, std::pair{"cache_space", &s.cache_space}}) {
    if (absl::Status status = text(field, out); !status.ok()) return status;
  }
  absl::StatusOr<std::string> tokens_sha = Text(header, "tokens_sha256");
  absl::StatusOr<int64_t> position = Count(header, "position", kMaxPositions);
  absl::StatusOr<int64_t> state_bytes = Count(header, "state_bytes", kMaxPartBytes);
  absl::StatusOr<int64_t> block_size = Count(header, "kv_block_size", 1 << 20);
  absl::StatusOr<int64_t> blocks = Count(header, "kv_blocks", kMaxPositions);
  absl::StatusOr<int64_t> block_bytes = Count(header, "kv_block_bytes", kMaxPartBytes);
  for (const absl::Status& status : {tokens_sha.status(), position.status(), state_bytes.status(),
                                     block_size.status(), blocks.status(), block_bytes.status()}) {
    if (!status.ok()) return status;
  }
  const auto pending = header.find("pending");
  if (pending == header.end() || !pending->is_array() || pending->size() > 16) {
    return Corrupt("header field 'pending' is missing or too long");
  }
  for (const nlohmann::json& id : *pending) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return Corrupt("header field 'pending' holds something other than token ids");
    }
    s.pending.push_back(id.get<int32_t>());
  }
  // Blocks only with a KV cache, never more than the positions need, never empty.
  const int64_t needed_blocks = *block_size == 0 ? 0 : (*position + *block_size - 1) / *block_size;
  if (*blocks != needed_blocks || (*blocks > 0 && *block_bytes == 0)) {
    return Corrupt(absl::StrCat("it has ", *blocks, " KV blocks of ", *block_bytes, " bytes for ",
                                *position, " positions in blocks of ", *block_size));
  }
  const uint64_t payload = body.size() - kFixed - header_length;
  // Each part within what is left, so no product below overflows.
  const uint64_t token_bytes = static_cast<uint64_t>(*position) * sizeof(int32_t);
  if (token_bytes > payload || static_cast<uint64_t>(*state_bytes) > payload ||
      (*blocks > 0 && static_cast<uint64_t>(*block_bytes) > payload / *blocks) ||
      token_bytes + *state_bytes + static_cast<uint64_t>(*blocks) * *block_bytes != payload) {
    return Corrupt("its parts' sizes do not add up to its length");
  }
  size_t offset = kFixed + header_length;
  s.tokens.resize(*position);
  std::memcpy(s.tokens.data(), body.data() + offset, token_bytes);
  offset += token_bytes;
  if (HexDigest(Sha256Of(TokenBytes(s.tokens))) != *tokens_sha) {
    return Corrupt("its tokens do not match their hash");
  }
  s.state.assign(body.substr(offset, *state_bytes));
  offset += *state_bytes;
  s.kv_block_size = *block_size;
  for (int64_t b = 0; b < *blocks; ++b) {
    s.kv_blocks.emplace_back(body.substr(offset, *block_bytes));
    offset += *block_bytes;
  }
  return s;
}

}  // namespace ridge
