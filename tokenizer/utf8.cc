#include "tokenizer/utf8.h"

namespace ridge {
namespace {

// How many bytes a sequence with this lead byte has, and the allowed range of its second byte
// (the Unicode "well-formed byte sequences" table: excludes overlongs and surrogates).
struct LeadInfo {
  int length;
  unsigned char second_lo;
  unsigned char second_hi;
};

LeadInfo Lead(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b >= 0xE1 && b <= 0xEC) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xEE && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of bytes from pos that form a valid prefix of a sequence (at least 1 for a valid lead
// byte), and whether that prefix is the whole sequence.
size_t ValidPrefix(std::string_view s, size_t pos, bool* complete) {
  const auto b = static_cast<unsigned char>(s[pos]);
  const LeadInfo info = Lead(b);
  *complete = false;
  if (info.length == 0) return 0;
  if (info.length == 1) {
    *complete = true;
    return 1;
  }
  size_t n = 1;
  for (; n < static_cast<size_t>(info.length); ++n) {
    if (pos + n >= s.size()) return n;
    const auto c = static_cast<unsigned char>(s[pos + n]);
    const unsigned char lo = n == 1 ? info.second_lo : 0x80;
    const unsigned char hi = n == 1 ? info.second_hi : 0xBF;
    if (c < lo || c > hi) return n;
  }
  *complete = true;
  return n;
}

}  // namespace

size_t ValidUtf8SequenceLength(std::string_view s, size_t pos) {
  bool complete;
  const size_t n = ValidPrefix(s, pos, &complete);
  return complete ? n : 0;
}

size_t FindInvalidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII fast path: most text is ASCII, and this loop is on every Encode call.
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = ValidUtf8SequenceLength(s, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

std::string ReplaceInvalidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    bool complete;
    const size_t n = ValidPrefix(s, pos, &complete);
    if (complete) {
      out.append(s.substr(pos, n));
      pos += n;
    } else {
      AppendUtf8(kReplacementChar, &out);
      pos += n == 0 ? 1 : n;
    }
  }
  return out;
}

size_t IncompleteUtf8TailLength(std::string_view s) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can start an unfinished one.
  const size_t first = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t pos = first; pos < s.size(); ++pos) {
    bool complete;
    const size_t n = ValidPrefix(s, pos, &complete);
    if (!complete && n > 0 && pos + n == s.size()) return s.size() - pos;
  }
  return 0;
}

char32_t DecodeUtf8(std::string_view s, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(s[*pos]);
  if (b0 < 0x80) {
    ++*pos;
    return b0;
  }
  const int len = Lead(b0).length;
  char32_t c = b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) c = (c << 6) | (static_cast<unsigned char>(s[*pos + i]) & 0x3F);
  *pos += len;
  return c;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace ridge
