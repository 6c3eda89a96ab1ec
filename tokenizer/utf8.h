// UTF-8 helpers shared by the tokenizer stages. Invalid input is replaced with U+FFFD by the
// "maximal subpart" rule that Python's bytes.decode(errors="replace") and Rust's
// String::from_utf8_lossy both follow, so texts cleaned here match texts cleaned there.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ridge {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length of the valid UTF-8 sequence starting at s[pos], or 0 when the bytes there are not one.
size_t ValidUtf8SequenceLength(std::string_view s, size_t pos);

// Byte offset of the first invalid sequence, or npos when the whole string is valid UTF-8.
size_t FindInvalidUtf8(std::string_view s);

inline bool IsValidUtf8(std::string_view s) { return FindInvalidUtf8(s) == std::string_view::npos; }

// Replaces every maximal invalid subpart with U+FFFD.
std::string ReplaceInvalidUtf8(std::string_view s);

// Length of a trailing prefix of a UTF-8 sequence that more bytes could still complete
// (0 to 3). A streaming decoder holds these bytes back instead of emitting U+FFFD.
size_t IncompleteUtf8TailLength(std::string_view s);

// Decodes the code point at s[*pos] (which must be valid UTF-8) and advances *pos.
char32_t DecodeUtf8(std::string_view s, size_t* pos);

void AppendUtf8(char32_t c, std::string* out);

}  // namespace ridge
