#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <vector>

#include "base/check.h"
#include "base/status_macros.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

constexpr char kWhere[] = "tokenizer.json normalizer";

// `tokenizers` normalizes with Unicode 9.0 tables (its unicode-normalization-alignments crate);
// ICU has newer ones. Normalization is stable for characters that existed in 9.0, and to the old
// tables a newer character is an unassigned code point: a starter that neither decomposes nor
// composes. So normalizing the runs of 9.0 characters with ICU and copying newer characters
// through reproduces the old tables exactly.
constexpr uint8_t kTablesMajorVersion = 9;

bool KnownToOldTables(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] != 0 && age[0] <= kTablesMajorVersion;
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* form) : form_(form) {}
  void Normalize(std::string* text) const override {
    size_t pos = 0;
    while (pos < text->size() && static_cast<unsigned char>((*text)[pos]) < 0x80) ++pos;
    if (pos == text->size()) return;  // ASCII is invariant under every normalization form
    std::string out;
    out.reserve(text->size());
    size_t run_begin = 0;
    pos = 0;
    while (pos < text->size()) {
      const size_t char_begin = pos;
      const char32_t c = DecodeUtf8(*text, &pos);
      if (c < 0x80 || KnownToOldTables(c)) continue;
      NormalizeRun(std::string_view(*text).substr(run_begin, char_begin - run_begin), &out);
      out.append(*text, char_begin, pos - char_begin);
      run_begin = pos;
    }
    NormalizeRun(std::string_view(*text).substr(run_begin), &out);
    *text = std::move(out);
  }

 private:
  void NormalizeRun(std::string_view run, std::string* out) const {
    if (run.empty()) return;
    const icu::StringPiece piece(run.data(), static_cast<int32_t>(run.size()));
    UErrorCode status = U_ZERO_ERROR;
    // Most text is already normalized; checking is much cheaper than rewriting.
    if (form_->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
      out->append(run);
      return;
    }
    status = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(out, static_cast<int32_t>(run.size()));
    form_->normalizeUTF8(0, piece, sink, nullptr, status);
    RIDGE_CHECK(U_SUCCESS(status));  // input is valid UTF-8, so ICU cannot fail here
  }

  const icu::Normalizer2* form_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override {
    std::vector<MatchRange> matches;
    pattern_->FindAll(*text, &matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text->size() + matches.size() * content_.size());
    size_t prev = 0;
    for (const MatchRange& m : matches) {
      out.append(*text, prev, m.begin - prev);
      out += content_;
      prev = m.end;
    }
    out.append(*text, prev, std::string::npos);
    *text = std::move(out);
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    size_t begin = 0;
    if (left_) {
      while (begin < text->size()) {
        size_t next = begin;
        if (!u_hasBinaryProperty(DecodeUtf8(*text, &next), UCHAR_WHITE_SPACE)) break;
        begin = next;
      }
    }
    size_t end = text->size();
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>((*text)[start]) & 0xC0) == 0x80) {
          --start;
        }
        size_t p = start;
        if (!u_hasBinaryProperty(DecodeUtf8(*text, &p), UCHAR_WHITE_SPACE)) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Normalize(std::string* text) const override {
    for (const auto& step : steps_) step->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<const icu::Normalizer2*> IcuForm(const std::string& type) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* form = nullptr;
  if (type == "NFC") form = icu::Normalizer2::getNFCInstance(status);
  if (type == "NFD") form = icu::Normalizer2::getNFDInstance(status);
  if (type == "NFKC") form = icu::Normalizer2::getNFKCInstance(status);
  if (type == "NFKD") form = icu::Normalizer2::getNFKDInstance(status);
  if (form == nullptr || U_FAILURE(status)) {
    return absl::InternalError(absl::StrCat("ICU has no ", type, " normalizer"));
  }
  return form;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& json) {
  if (json.is_null()) return nullptr;
  ASSIGN_OR_RETURN(std::string type, GetType(json, kWhere));
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    ASSIGN_OR_RETURN(const icu::Normalizer2* form, IcuForm(type));
    return std::make_unique<UnicodeNormalizer>(form);
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prefix, GetString(json, kWhere, "prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") {
    auto pattern = json.find("pattern");
    if (pattern == json.end()) return FieldError(kWhere, "pattern", "present");
    ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, ParsePattern(*pattern, kWhere));
    ASSIGN_OR_RETURN(std::string content, GetString(json, kWhere, "content"));
    return std::make_unique<ReplaceNormalizer>(std::move(regex), std::move(content));
  }
  if (type == "Strip") {
    ASSIGN_OR_RETURN(bool left, GetBool(json, kWhere, "strip_left", true));
    ASSIGN_OR_RETURN(bool right, GetBool(json, kWhere, "strip_right", true));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Sequence") {
    auto list = json.find("normalizers");
    if (list == json.end() || !list->is_array()) {
      return FieldError(kWhere, "normalizers", "an array");
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> step, ParseNormalizer(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("unsupported normalizer type '", type, "'"));
}

}  // namespace ridge
