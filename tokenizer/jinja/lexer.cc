#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"

namespace ridge::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = pos;
      while (start < n &&
             !(src_[start] == '{' && start + 1 < n &&
               (src_[start + 1] == '{' || src_[start + 1] == '%' || src_[start + 1] == '#'))) {
        ++start;
      }
      std::string text = src_.substr(pos, start - pos);
      if (start == n) {
        Emit(Token::Type::kText, std::move(text), pos);
        break;
      }
      const char kind = src_[start + 1];
      const char sign =
          start + 2 < n && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only whitespace between the line start and the tag.
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        const bool line_starting = pos == 0 || src_[pos - 1] == '\n';
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(l_pos), text.end(), IsSpace)) {
          text.resize(l_pos);
        }
      }
      if (!text.empty()) Emit(Token::Type::kText, std::move(text), pos);
      size_t inner = start + 2 + (sign != 0 ? 1 : 0);
      if (kind == '#') {
        const size_t end = src_.find("#}", inner);
        if (end == std::string::npos) return Error(start, "comment is never closed ('#}')");
        pos = end + 2;
        const bool strip = end > inner && src_[end - 1] == '-';
        const bool keep = end > inner && src_[end - 1] == '+';
        SkipAfterTag(strip, !keep, &pos);
        continue;
      }
      Emit(kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", start);
      absl::StatusOr<size_t> after = LexTag(kind == '{' ? '}' : '%', inner);
      if (!after.ok()) return after.status();
      pos = *after;
    }
    Emit(Token::Type::kEnd, "", n);
    return std::move(tokens_);
  }

 private:
  void Emit(Token::Type type, std::string text, size_t offset) {
    Token t{type, std::move(text), 1, 1};
    Position(offset, &t.line, &t.column);
    tokens_.push_back(std::move(t));
  }

  void Position(size_t offset, int* line, int* column) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    *line = static_cast<int>(it - line_starts_.begin()) + 1;
    *column = static_cast<int>(offset - *it) + 1;
  }

  absl::Status Error(size_t offset, const std::string& message) const {
    int line = 1, column = 1;
    Position(offset, &line, &column);
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ", column ", column, ": ", message));
  }

  // After a tag: "-" drops all whitespace; trim_blocks drops one newline after block tags.
  void SkipAfterTag(bool strip, bool trim_newline, size_t* pos) const {
    if (strip) {
      while (*pos < src_.size() && IsSpace(src_[*pos])) ++*pos;
    } else if (trim_newline && *pos < src_.size() && src_[*pos] == '\n') {
      ++*pos;
    }
  }

  // Lexes the inside of a {{ }} or {% %} tag from `pos`; returns the offset after the tag.
  absl::StatusOr<size_t> LexTag(char close, size_t pos) {
    const size_t n = src_.size();
    int depth = 0;  // open brackets: a closer inside a dict literal is not the tag's end
    while (true) {
      while (pos < n && IsSpace(src_[pos])) ++pos;
      if (pos >= n)
        return Error(pos, close == '}' ? "'{{' is never closed" : "'{%' is never closed");
      if (depth == 0) {
        const bool signed_end = (src_[pos] == '-' || src_[pos] == '+') && pos + 2 < n + 0 &&
                                src_[pos + 1] == close && src_[pos + 2] == '}';
        if (signed_end || (src_[pos] == close && pos + 1 < n && src_[pos + 1] == '}')) {
          Emit(close == '}' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", pos);
          const char sign = signed_end ? src_[pos] : 0;
          pos += signed_end ? 3 : 2;
          SkipAfterTag(sign == '-', close == '%' && sign != '+', &pos);
          return pos;
        }
      }
      const char c = src_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < n &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
          ++end;
        }
        Emit(Token::Type::kName, src_.substr(pos, end - pos), pos);
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        absl::StatusOr<size_t> end = LexNumber(pos);
        if (!end.ok()) return end.status();
        pos = *end;
      } else if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> end = LexString(pos);
        if (!end.ok()) return end.status();
        pos = *end;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (std::string_view two : kTwo) {
          if (src_.compare(pos, 2, two) == 0) op = std::string(two);
        }
        if (op.size() == 1 &&
            std::string_view("+-*/%~=<>()[]{},.:|").find(c) == std::string::npos) {
          return Error(pos, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        Emit(Token::Type::kOperator, op, pos);
        pos += op.size();
      }
    }
  }

  absl::StatusOr<size_t> LexNumber(size_t pos) {
    const size_t n = src_.size();
    size_t end = pos;
    auto digits = [&] {
      while (end < n && (std::isdigit(static_cast<unsigned char>(src_[end])) ||
                         (src_[end] == '_' && end + 1 < n &&
                          std::isdigit(static_cast<unsigned char>(src_[end + 1]))))) {
        ++end;
      }
    };
    digits();
    bool is_float = false;
    if (end + 1 < n && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < n && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < n && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < n && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    if (!is_float && text.size() > 18) return Error(pos, "integer literal is too large");
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, std::move(text), pos);
    return end;
  }

  absl::StatusOr<size_t> LexString(size_t pos) {
    const char quote = src_[pos];
    const size_t n = src_.size();
    std::string value;
    size_t i = pos + 1;
    while (i < n && src_[i] != quote) {
      if (src_[i] != '\\') {
        value.push_back(src_[i++]);
        continue;
      }
      if (i + 1 >= n) break;
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value.push_back('\n');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case '\n':
          break;  // a backslash-newline continues the literal
        case 'x':
        case 'u':
        case 'U': {
          const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + len > n) return Error(i - 2, "truncated escape in string literal");
          uint32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            const char h = src_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              return Error(i - 2, "malformed escape in string literal");
            }
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(h) - 'a' + 10);
          }
          if (cp > 0x10FFFF) return Error(i - 2, "escape beyond U+10FFFF in string literal");
          AppendUtf8(cp, &value);
          i += len;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < n && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
              cp = cp * 8 + static_cast<uint32_t>(src_[i] - '0');
            }
            AppendUtf8(cp, &value);
          } else {  // unknown escapes stay as written, as in Python
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    if (i >= n) return Error(pos, "string literal is never closed");
    Emit(Token::Type::kString, std::move(value), pos);
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  // Newlines are normalised to "\n", and one trailing newline is dropped (keep_trailing_newline
  // is off in transformers' environment).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(source[i]);
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace ridge::jinja
