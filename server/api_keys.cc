#include "server/api_keys.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {
namespace {

absl::Status CheckKey(const std::string& key, const std::string& where) {
  if (key.size() < 8 || key.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": an API key must be 8 to 256 characters, got ", key.size()));
  }
  for (unsigned char c : key) {
    if (c <= ' ' || c >= 127) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": an API key must be printable ASCII without spaces"));
    }
  }
  return absl::OkStatus();
}

// Equal in length and bytes, looking at every byte whatever the first difference.
bool SameKey(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i < b.size() ? i : 0]);
  }
  return diff == 0 && !b.empty();
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& key, const std::string& key_file) {
  std::vector<std::string> keys;
  if (!key.empty()) {
    RETURN_IF_ERROR(CheckKey(key, "--api-key"));
    keys.push_back(key);
  }
  if (!key_file.empty()) {
    std::ifstream file(key_file);
    if (!file) {
      return absl::NotFoundError(absl::StrCat("--api-key-file '", key_file, "' cannot be read"));
    }
    size_t found = 0;
    std::string line;
    for (int number = 1; std::getline(file, line); ++number) {
      const std::string entry(absl::StripAsciiWhitespace(line));
      if (entry.empty() || entry[0] == '#') continue;
      RETURN_IF_ERROR(CheckKey(entry, absl::StrCat("--api-key-file ", key_file, " line ", number)));
      keys.push_back(entry);
      ++found;
    }
    if (found == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api-key-file '", key_file, "' holds no key (one a line)"));
    }
  }
  ApiKeys out;
  out.keys_ = std::move(keys);
  return out;
}

bool ApiKeys::Accepts(std::string_view authorization) const {
  if (keys_.empty()) return true;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) {
      return false;
    }
  }
  const std::string_view given = authorization.substr(kScheme.size());
  bool accepted = false;
  for (const std::string& key : keys_) accepted |= SameKey(given, key);
  return accepted;
}

}  // namespace ridge
