#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace ridge {
namespace {

struct Tables {
  std::array<char32_t, 256> char_of_byte;
  std::array<std::string, 256> utf8_of_byte;
  Tables() {
    // Printable Latin-1 bytes stand for themselves; the rest get code points from 256 upward.
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      char_of_byte[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      AppendUtf8(char_of_byte[b], &utf8_of_byte[b]);
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

void AppendByteLevel(std::string_view bytes, std::string* out) {
  const Tables& t = GetTables();
  for (char c : bytes) out->append(t.utf8_of_byte[static_cast<uint8_t>(c)]);
}

std::optional<uint8_t> ByteForByteLevelChar(char32_t c) {
  if (c < 256) {
    const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
    if (printable) return static_cast<uint8_t>(c);
    return std::nullopt;
  }
  const Tables& t = GetTables();
  // Code points 256.. were handed out in byte order to the non-printable bytes.
  if (c >= 256 + 68) return std::nullopt;
  for (int b = 0; b < 256; ++b) {
    if (t.char_of_byte[b] == c) return static_cast<uint8_t>(b);
  }
  return std::nullopt;
}

}  // namespace ridge
