#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <string>

#include "absl/strings/str_cat.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

pcre2_code* Code(void* p) { return static_cast<pcre2_code*>(p); }

// One match-data block per thread: FindAll is called concurrently from the server's threads and
// allocating one per call would cost more than the match itself for short words.
struct ThreadMatchData {
  ThreadMatchData() : data(pcre2_match_data_create(1, nullptr)) {}
  ~ThreadMatchData() { pcre2_match_data_free(data); }
  pcre2_match_data* data;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("invalid regex '", std::string(pattern),
                                                   "' at offset ", offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  // JIT failure (e.g. an unsupported platform) is not an error: the interpreter gives the same
  // matches, only slower.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(code));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  // Escapes every ASCII symbol (\Q...\E would break on a literal containing "\E").
  std::string escaped;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) escaped.push_back('\\');
    escaped.push_back(c);
  }
  return Compile(escaped);
}

Regex::~Regex() { pcre2_code_free(Code(code_)); }

void Regex::FindAll(std::string_view text, std::vector<MatchRange>* matches) const {
  thread_local ThreadMatchData match_data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    // The text was validated once by the caller, so PCRE2's per-call UTF check is skipped.
    const int rc = pcre2_match(Code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               match_data.data, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit: no further matches.
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      matches->push_back({begin, end});
      start = end;
    } else {
      // An empty match produces no piece; step over one whole character and search again.
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
}

}  // namespace ridge
