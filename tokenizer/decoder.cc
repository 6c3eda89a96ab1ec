#include "tokenizer/decoder.h"

#include <algorithm>
#include <optional>

#include "base/status_macros.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

constexpr char kWhere[] = "tokenizer.json decoder";

// A token made only of byte-level characters gives those bytes; any other token (an added token
// such as "▁" spelled outside the byte alphabet) is taken as it is.
void AppendByteLevelBytes(const std::string& token, std::string* bytes) {
  const size_t mark = bytes->size();
  size_t pos = 0;
  while (pos < token.size()) {
    const std::optional<uint8_t> b = ByteForByteLevelChar(DecodeUtf8(token, &pos));
    if (!b) {
      bytes->resize(mark);
      *bytes += token;
      return;
    }
    bytes->push_back(static_cast<char>(*b));
  }
}

class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& token : *tokens) AppendByteLevelBytes(token, &bytes);
    tokens->assign(1, ReplaceInvalidUtf8(bytes));
  }
  std::string PieceBytes(std::string piece, bool) const override {
    std::string bytes;
    AppendByteLevelBytes(piece, &bytes);
    return bytes;
  }
  bool fuses() const override { return true; }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] = Spaces((*tokens)[i], i == 0 && strip_first_);
    }
  }
  std::string PieceBytes(std::string piece, bool) const override { return Spaces(piece, false); }

 private:
  // The replacement characters of `t` as spaces (dropped with `strip`).
  std::string Spaces(const std::string& t, bool strip) const {
    std::string out;
    size_t pos = 0;
    while (pos < t.size()) {
      if (t.compare(pos, replacement_.size(), replacement_) == 0) {
        if (!strip) out.push_back(' ');
        pos += replacement_.size();
      } else {
        out.push_back(t[pos++]);
      }
    }
    return out;
  }

  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) t = Replaced(std::move(t));
  }
  std::string PieceBytes(std::string piece, bool) const override {
    return Replaced(std::move(piece));
  }

 private:
  std::string Replaced(std::string t) const {
    std::vector<MatchRange> matches;
    pattern_->FindAll(t, &matches);
    if (matches.empty()) return t;
    std::string out;
    size_t prev = 0;
    for (const MatchRange& m : matches) {
      out.append(t, prev, m.begin - prev);
      out += content_;
      prev = m.end;
    }
    out.append(t, prev, std::string::npos);
    return out;
  }

  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xAB>" -> 0xAB. Accepts what Rust's u8::from_str_radix(.., 16) accepts for the two
// characters, a leading '+' included.
std::optional<uint8_t> ParseByteToken(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  const int hi = t[3] == '+' ? 0 : HexValue(t[3]);
  const int lo = HexValue(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    auto flush = [&]() {
      if (run.empty()) return;
      if (IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      run.clear();
    };
    for (std::string& t : *tokens) {
      if (std::optional<uint8_t> b = ParseByteToken(t)) {
        run.push_back(static_cast<char>(*b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }
  std::string PieceBytes(std::string piece, bool) const override {
    if (std::optional<uint8_t> b = ParseByteToken(piece))
      return std::string(1, static_cast<char>(*b));
    return piece;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
  std::string PieceBytes(std::string piece, bool) const override { return piece; }
  bool fuses() const override { return true; }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) Strip(&t);
  }
  // After a Fuse it strips the ends of the whole text, not of a token inside it.
  std::string PieceBytes(std::string piece, bool after_fuse) const override {
    if (!after_fuse) Strip(&piece);
    return piece;
  }

 private:
  void Strip(std::string* token) const {
    std::string& t = *token;
    std::vector<size_t> starts;  // byte offset of each character
    for (size_t pos = 0; pos < t.size();) {
      starts.push_back(pos);
      DecodeUtf8(t, &pos);
    }
    auto char_at = [&](size_t i) {
      size_t p = starts[i];
      return DecodeUtf8(t, &p);
    };
    size_t cut_begin = 0;
    for (size_t i = 0; i < start_ && i < starts.size() && char_at(i) == content_; ++i) {
      cut_begin = i + 1;
    }
    size_t cut_end = starts.size();
    for (size_t i = 0; i < stop_ && i < starts.size(); ++i) {
      const size_t index = starts.size() - i - 1;
      if (char_at(index) != content_) break;
      cut_end = index;
    }
    if (cut_end < cut_begin) cut_end = cut_begin;
    const size_t b = cut_begin < starts.size() ? starts[cut_begin] : t.size();
    const size_t e = cut_end < starts.size() ? starts[cut_end] : t.size();
    t = t.substr(b, e - b);
  }

  char32_t content_;
  size_t start_;
  size_t stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }
  std::string PieceBytes(std::string piece, bool after_fuse) const override {
    for (const auto& step : steps_) {
      piece = step->PieceBytes(std::move(piece), after_fuse);
      after_fuse = after_fuse || step->fuses();
    }
    return piece;
  }
  bool fuses() const override {
    return std::any_of(steps_.begin(), steps_.end(), [](const auto& s) { return s->fuses(); });
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

absl::StatusOr<char32_t> SingleChar(const std::string& s, const char* field) {
  size_t pos = 0;
  if (s.empty() || !IsValidUtf8(s)) return FieldError(kWhere, field, "one character");
  const char32_t c = DecodeUtf8(s, &pos);
  if (pos != s.size()) return FieldError(kWhere, field, "one character");
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& json) {
  if (json.is_null()) return nullptr;
  ASSIGN_OR_RETURN(std::string type, GetType(json, kWhere));
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, GetString(json, kWhere, "replacement"));
    RETURN_IF_ERROR(SingleChar(replacement, "replacement").status());
    bool strip_first = true;
    auto scheme = json.find("prepend_scheme");
    if (scheme != json.end() && !scheme->is_null()) {
      ASSIGN_OR_RETURN(std::string name, GetString(json, kWhere, "prepend_scheme"));
      strip_first = name != "never";
    } else {
      ASSIGN_OR_RETURN(strip_first, GetBool(json, kWhere, "add_prefix_space", true));
    }
    return std::make_unique<MetaspaceDecoder>(std::move(replacement), strip_first);
  }
  if (type == "Replace") {
    auto pattern = json.find("pattern");
    if (pattern == json.end()) return FieldError(kWhere, "pattern", "present");
    ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, ParsePattern(*pattern, kWhere));
    ASSIGN_OR_RETURN(std::string content, GetString(json, kWhere, "content"));
    return std::make_unique<ReplaceDecoder>(std::move(regex), std::move(content));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    ASSIGN_OR_RETURN(std::string content, GetString(json, kWhere, "content"));
    ASSIGN_OR_RETURN(char32_t c, SingleChar(content, "content"));
    ASSIGN_OR_RETURN(int64_t start, GetInt(json, kWhere, "start", 0));
    ASSIGN_OR_RETURN(int64_t stop, GetInt(json, kWhere, "stop", 0));
    if (start < 0 || stop < 0) return FieldError(kWhere, "start/stop", "non-negative");
    return std::make_unique<StripDecoder>(c, start, stop);
  }
  if (type == "Sequence") {
    auto list = json.find("decoders");
    if (list == json.end() || !list->is_array()) return FieldError(kWhere, "decoders", "an array");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<Decoder> step, ParseDecoder(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("unsupported decoder type '", type, "'"));
}

}  // namespace ridge
