#include "tokenizer/post_processor.h"

#include <cstdint>
#include <string>

#include "base/status_macros.h"

namespace ridge {
namespace {

constexpr char kWhere[] = "tokenizer.json post_processor";

// A token id: an integer in [0, 2^31).
absl::StatusOr<int32_t> TokenId(const Json& id, const char* key) {
  if (!id.is_number_integer() ||
      (id.is_number_unsigned() ? id.get<uint64_t>() > INT32_MAX
                               : id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)) {
    return FieldError(kWhere, key, "token ids in [0, 2^31)");
  }
  return static_cast<int32_t>(id.get<int64_t>());
}

absl::StatusOr<SpecialTokenFrame> ParseTemplate(const Json& json) {
  auto single = json.find("single");
  if (single == json.end() || !single->is_array()) return FieldError(kWhere, "single", "an array");
  auto specials = json.find("special_tokens");
  SpecialTokenFrame frame;
  bool seen_sequence = false;
  for (const Json& piece : *single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      if (seen_sequence) {
        return absl::InvalidArgumentError(
            absl::StrCat(kWhere, ": single template uses the sequence twice"));
      }
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") ||
        !piece["SpecialToken"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, ": bad template piece ", piece.dump()));
    }
    ASSIGN_OR_RETURN(std::string name, GetString(piece["SpecialToken"], kWhere, "id"));
    if (specials == json.end() || !specials->is_object() || !specials->contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, ": template token '", name, "' is not in special_tokens"));
    }
    // (const operator[] on a missing key is undefined behaviour in nlohmann: find() only.)
    const auto entry = specials->find(name);
    const auto ids = entry->is_object() ? entry->find("ids") : entry->end();
    if (!entry->is_object() || ids == entry->end() || !ids->is_array()) {
      return FieldError(kWhere, "special_tokens.ids", "an array");
    }
    std::vector<int32_t>& target = seen_sequence ? frame.suffix : frame.prefix;
    for (const Json& id : *ids) {
      ASSIGN_OR_RETURN(const int32_t value, TokenId(id, "special_tokens.ids"));
      target.push_back(value);
    }
  }
  if (!seen_sequence) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, ": single template has no $A"));
  }
  return frame;
}

// BertProcessing / RobertaProcessing: {"cls": ["[CLS]", 101], "sep": ["[SEP]", 102]}.
absl::StatusOr<int32_t> PairId(const Json& json, const char* key) {
  auto it = json.find(key);
  if (it == json.end() || !it->is_array() || it->size() != 2) {
    return FieldError(kWhere, key, "a [token, id] pair");
  }
  return TokenId((*it)[1], key);
}

}  // namespace

absl::StatusOr<SpecialTokenFrame> ParsePostProcessor(const Json& json) {
  if (json.is_null()) return SpecialTokenFrame{};
  ASSIGN_OR_RETURN(std::string type, GetType(json, kWhere));
  if (type == "TemplateProcessing") return ParseTemplate(json);
  if (type == "ByteLevel") return SpecialTokenFrame{};  // only adjusts offsets
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    ASSIGN_OR_RETURN(int32_t cls, PairId(json, "cls"));
    ASSIGN_OR_RETURN(int32_t sep, PairId(json, "sep"));
    return SpecialTokenFrame{{cls}, {sep}};
  }
  if (type == "Sequence") {
    auto list = json.find("processors");
    if (list == json.end() || !list->is_array()) {
      return FieldError(kWhere, "processors", "an array");
    }
    SpecialTokenFrame frame;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(SpecialTokenFrame inner, ParsePostProcessor(item));
      // Each processor wraps what the previous ones produced.
      inner.prefix.insert(inner.prefix.end(), frame.prefix.begin(), frame.prefix.end());
      frame.prefix = std::move(inner.prefix);
      frame.suffix.insert(frame.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return frame;
  }
  return absl::UnimplementedError(absl::StrCat("unsupported post_processor type '", type, "'"));
}

}  // namespace ridge
