#include "tokenizer/pre_tokenizer.h"

#include <utility>

#include "base/status_macros.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/regex.h"
#include "tokenizer/split.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

constexpr char kWhere[] = "tokenizer.json pre_tokenizer";

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits every piece around the matches of `regex`.
void SplitPieces(const Regex& regex, SplitBehavior behavior, bool invert,
                 std::vector<Piece>* pieces) {
  std::vector<Piece> out;
  out.reserve(pieces->size() * 4);
  std::vector<MatchRange> matches;
  for (Piece& piece : *pieces) {
    matches.clear();
    regex.FindAll(piece.text, &matches);
    for (const MatchRange& r : SplitByMatches(piece.text.size(), matches, behavior, invert)) {
      if (r.end > r.begin) {
        out.push_back(
            {piece.text.substr(r.begin, r.end - r.begin), piece.at_start && r.begin == 0});
      }
    }
  }
  *pieces = std::move(out);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitPieces(*regex_, behavior_, invert_, pieces);
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(p.text.begin(), ' ');
      }
    }
    if (regex_) SplitPieces(*regex_, SplitBehavior::kIsolated, false, pieces);
    std::string mapped;
    for (Piece& p : *pieces) {
      mapped.clear();
      AppendByteLevel(p.text, &mapped);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split,
                        std::unique_ptr<Regex> replacement_regex)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        replacement_regex_(std::move(replacement_regex)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (Piece& p : *pieces) {
      std::string replaced;
      replaced.reserve(p.text.size() + replacement_.size());
      for (char c : p.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced.push_back(c);
        }
      }
      const bool starts_with_replacement =
          replaced.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts_with_replacement &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        replaced.insert(0, replacement_);
      }
      p.text = std::move(replaced);
    }
    if (split_) SplitPieces(*replacement_regex_, SplitBehavior::kMergedWithNext, false, pieces);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  std::unique_ptr<Regex> replacement_regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> MakeSplit(std::string_view pattern,
                                                        SplitBehavior behavior, bool invert) {
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(pattern));
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseMetaspace(const Json& json) {
  ASSIGN_OR_RETURN(std::string replacement, GetString(json, kWhere, "replacement"));
  size_t pos = 0;
  if (replacement.empty() || !IsValidUtf8(replacement) ||
      (DecodeUtf8(replacement, &pos), pos != replacement.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, ": Metaspace replacement must be one character"));
  }
  PrependScheme scheme = PrependScheme::kAlways;
  auto scheme_field = json.find("prepend_scheme");
  if (scheme_field != json.end() && !scheme_field->is_null()) {
    ASSIGN_OR_RETURN(std::string name, GetString(json, kWhere, "prepend_scheme"));
    if (name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, ": unknown Metaspace prepend_scheme '", name, "'"));
    }
  } else {
    // Files older than prepend_scheme carry add_prefix_space instead.
    ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(json, kWhere, "add_prefix_space", true));
    scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  ASSIGN_OR_RETURN(bool split, GetBool(json, kWhere, "split", true));
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Literal(replacement));
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split,
                                                 std::move(regex));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& json) {
  if (json.is_null()) return nullptr;
  ASSIGN_OR_RETURN(std::string type, GetType(json, kWhere));
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(json, kWhere, "add_prefix_space", true));
    ASSIGN_OR_RETURN(bool use_regex, GetBool(json, kWhere, "use_regex", true));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern));
    }
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Split") {
    auto pattern = json.find("pattern");
    if (pattern == json.end()) return FieldError(kWhere, "pattern", "present");
    ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, ParsePattern(*pattern, kWhere));
    ASSIGN_OR_RETURN(std::string behavior_name, GetString(json, kWhere, "behavior"));
    ASSIGN_OR_RETURN(SplitBehavior behavior, ParseSplitBehavior(behavior_name));
    ASSIGN_OR_RETURN(bool invert, GetBool(json, kWhere, "invert", false));
    return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
  }
  if (type == "Metaspace") return ParseMetaspace(json);
  if (type == "Digits") {
    ASSIGN_OR_RETURN(bool individual, GetBool(json, kWhere, "individual_digits", false));
    return MakeSplit("[0-9]", individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                     false);
  }
  if (type == "Whitespace") return MakeSplit(R"(\w+|[^\w\s]+)", SplitBehavior::kRemoved, true);
  if (type == "WhitespaceSplit") return MakeSplit(R"(\s+)", SplitBehavior::kRemoved, false);
  if (type == "Sequence") {
    auto list = json.find("pretokenizers");
    if (list == json.end() || !list->is_array()) {
      return FieldError(kWhere, "pretokenizers", "an array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> step, ParsePreTokenizer(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("unsupported pre_tokenizer type '", type, "'"));
}

}  // namespace ridge
