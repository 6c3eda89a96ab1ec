#include "tokenizer/added_vocabulary.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "base/status_macros.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

constexpr char kWhere[] = "tokenizer.json added_tokens";

// Rust's char::is_alphanumeric, plus '_', which `tokenizers` uses for single_word.
bool IsWordChar(char32_t c) {
  if (c == '_') return true;
  const int8_t type = u_charType(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool IsWhitespace(char32_t c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }

size_t PrevCharStart(std::string_view s, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80);
  return pos;
}

char32_t CharAt(std::string_view s, size_t pos) { return DecodeUtf8(s, &pos); }

}  // namespace

void AddedVocabulary::AddPattern(Matcher* m, std::string text, size_t token_index) {
  if (text.empty()) return;
  m->first_byte[static_cast<uint8_t>(text[0])] = true;
  if (std::find(m->lengths.begin(), m->lengths.end(), text.size()) == m->lengths.end()) {
    m->lengths.push_back(text.size());
    std::sort(m->lengths.rbegin(), m->lengths.rend());
  }
  // The first token listed wins when two spell the same text.
  m->token_of.try_emplace(std::move(text), token_index);
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json& added_tokens,
                                                          const Normalizer* normalizer) {
  AddedVocabulary vocab;
  if (added_tokens.is_null()) return vocab;
  if (!added_tokens.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " is not an array"));
  }
  for (const Json& item : added_tokens) {
    if (!item.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(kWhere, ": entry is not an object"));
    }
    AddedToken t;
    ASSIGN_OR_RETURN(int64_t id, GetInt(item, kWhere, "id", -1));
    if (id < 0 || id > (1 << 30)) return FieldError(kWhere, "id", "a valid id");
    t.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(t.content, GetString(item, kWhere, "content"));
    if (!IsValidUtf8(t.content)) {
      return absl::InvalidArgumentError(absl::StrCat(kWhere, ": content is not valid UTF-8"));
    }
    ASSIGN_OR_RETURN(t.single_word, GetBool(item, kWhere, "single_word", false));
    ASSIGN_OR_RETURN(t.lstrip, GetBool(item, kWhere, "lstrip", false));
    ASSIGN_OR_RETURN(t.rstrip, GetBool(item, kWhere, "rstrip", false));
    ASSIGN_OR_RETURN(t.special, GetBool(item, kWhere, "special", false));
    // `tokenizers` defaults "normalized" to the opposite of "special".
    ASSIGN_OR_RETURN(t.normalized, GetBool(item, kWhere, "normalized", !t.special));
    vocab.index_of_id_[t.id] = vocab.tokens_.size();
    vocab.id_of_content_.try_emplace(t.content, t.id);
    vocab.tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    const AddedToken& t = vocab.tokens_[i];
    if (t.normalized) {
      std::string text = t.content;
      if (normalizer != nullptr) normalizer->Normalize(&text);
      AddPattern(&vocab.normalized_, std::move(text), i);
    } else {
      AddPattern(&vocab.raw_, t.content, i);
    }
  }
  return vocab;
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  auto it = index_of_id_.find(id);
  return it == index_of_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::FindByContent(std::string_view content) const {
  auto it = id_of_content_.find(AsAbsl(content));
  if (it == id_of_content_.end()) return std::nullopt;
  return it->second;
}

std::vector<TextSpan> AddedVocabulary::Split(std::string_view text, const Matcher& m) const {
  std::vector<TextSpan> spans;
  size_t done = 0;  // end of the last emitted span
  size_t pos = 0;   // where the search for the next match resumes
  while (pos < text.size() && !m.token_of.empty()) {
    if (!m.first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const AddedToken* token = nullptr;
    size_t match_len = 0;
    for (size_t len : m.lengths) {
      if (pos + len > text.size()) continue;
      auto it = m.token_of.find(AsAbsl(text.substr(pos, len)));
      if (it != m.token_of.end()) {
        token = &tokens_[it->second];
        match_len = len;
        break;
      }
    }
    if (token == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    size_t end = pos + match_len;
    pos = end;
    if (token->single_word) {
      const bool word_before = begin > 0 && IsWordChar(CharAt(text, PrevCharStart(text, begin)));
      const bool word_after = end < text.size() && IsWordChar(CharAt(text, end));
      if (word_before || word_after) continue;
    }
    if (token->lstrip) {
      size_t b = begin;
      while (b > done) {
        const size_t prev = PrevCharStart(text, b);
        if (!IsWhitespace(CharAt(text, prev))) break;
        b = prev;
      }
      begin = b;
    }
    if (token->rstrip) {
      while (end < text.size()) {
        size_t next = end;
        if (!IsWhitespace(DecodeUtf8(text, &next))) break;
        end = next;
      }
      pos = end;
    }
    if (begin > done) spans.push_back({done, begin, std::nullopt});
    spans.push_back({begin, end, token->id});
    done = end;
  }
  if (done < text.size() || spans.empty()) spans.push_back({done, text.size(), std::nullopt});
  return spans;
}

}  // namespace ridge
