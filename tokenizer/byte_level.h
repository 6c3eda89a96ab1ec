// GPT-2's reversible map between bytes and printable code points: byte-level BPE vocabularies
// spell every byte as one such character (space is 'Ġ', newline 'Ċ').
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ridge {

// Appends the byte-level spelling of `bytes` to `out`.
void AppendByteLevel(std::string_view bytes, std::string* out);

// The byte that code point `c` stands for, if it is one of the 256 byte characters.
std::optional<uint8_t> ByteForByteLevelChar(char32_t c);

}  // namespace ridge
