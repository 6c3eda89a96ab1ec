#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

const Json& FieldOrNull(const Json& j, const char* key) {
  static const Json* const kNull = new Json(nullptr);
  auto it = j.find(key);
  return it == j.end() ? *kNull : *it;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(std::string tokenizer_json, ReadFile(dir / "tokenizer.json"));
  std::string config_json;
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    ASSIGN_OR_RETURN(config_json, ReadFile(dir / "tokenizer_config.json"));
  }
  auto tokenizer = FromJson(tokenizer_json, config_json);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(dir.string(), ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view config_json) {
  const Json root = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError("tokenizer.json is not valid JSON");
  }
  if (!root.is_object()) return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  try {
    const Json& model = FieldOrNull(root, "model");
    if (!model.is_object()) return absl::InvalidArgumentError("tokenizer.json has no model");
    // Files written by `tokenizers` always tag the model; very old BPE files may omit it.
    std::string type = "BPE";
    if (model.contains("type")) {
      ASSIGN_OR_RETURN(type, GetString(model, "tokenizer.json model", "type"));
    }
    if (type != "BPE") {
      return absl::UnimplementedError(absl::StrCat("unsupported model type '", type,
                                                   "' (ridgeserve supports BPE tokenizers only)"));
    }
    ASSIGN_OR_RETURN(t->model_, BpeModel::FromJson(model));
    ASSIGN_OR_RETURN(t->normalizer_, ParseNormalizer(FieldOrNull(root, "normalizer")));
    ASSIGN_OR_RETURN(t->pre_tokenizer_, ParsePreTokenizer(FieldOrNull(root, "pre_tokenizer")));
    ASSIGN_OR_RETURN(t->decoder_, ParseDecoder(FieldOrNull(root, "decoder")));
    ASSIGN_OR_RETURN(t->frame_, ParsePostProcessor(FieldOrNull(root, "post_processor")));
    ASSIGN_OR_RETURN(t->added_, AddedVocabulary::FromJson(FieldOrNull(root, "added_tokens"),
                                                          t->normalizer_.get()));
  } catch (const nlohmann::json::exception& e) {
    // The typed accessors cover the fields read above; this catches any shape they missed.
    return absl::InvalidArgumentError(absl::StrCat("malformed tokenizer.json: ", e.what()));
  }
  if (!config_json.empty()) {
    ASSIGN_OR_RETURN(t->config_, ParseTokenizerConfig(config_json));
  }

  t->vocab_size_ = t->model_->id_limit();
  for (const AddedToken& a : t->added_.tokens())
    t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
  for (const int32_t id : t->frame_.prefix) {
    if (!t->IdToToken(id)) return absl::InvalidArgumentError("post_processor uses an unknown id");
  }
  for (const int32_t id : t->frame_.suffix) {
    if (!t->IdToToken(id)) return absl::InvalidArgumentError("post_processor uses an unknown id");
  }
  auto resolve = [&t](const std::optional<std::string>& name,
                      const char* field) -> absl::StatusOr<std::optional<int32_t>> {
    if (!name) return std::nullopt;
    std::optional<int32_t> id = t->TokenToId(*name);
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json ", field, " '", *name, "' is not in the vocabulary"));
    }
    return id;
  };
  ASSIGN_OR_RETURN(t->bos_id_, resolve(t->config_.bos_token, "bos_token"));
  ASSIGN_OR_RETURN(t->eos_id_, resolve(t->config_.eos_token, "eos_token"));
  // transformers rebuilds the post-processor from add_bos_token / add_eos_token when the config
  // sets them explicitly; do the same so that the config file has the last word.
  if (t->config_.add_bos_token || t->config_.add_eos_token) {
    SpecialTokenFrame frame;
    if (t->config_.add_bos_token.value_or(false) && t->bos_id_) frame.prefix = {*t->bos_id_};
    if (t->config_.add_eos_token.value_or(false) && t->eos_id_) frame.suffix = {*t->eos_id_};
    t->frame_ = std::move(frame);
  }
  return t;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  const size_t bad = FindInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is not valid UTF-8 (first bad byte at offset ", bad, ")"));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = frame_.prefix;
  std::vector<Piece> pieces;
  std::string normalized;
  // Added tokens are cut out first (raw ones before normalization, normalized ones after);
  // the text between them goes through normalizer, pre-tokenizer and model.
  for (const TextSpan& raw : added_.SplitRaw(text)) {
    if (raw.id) {
      ids.push_back(*raw.id);
      continue;
    }
    if (raw.end == raw.begin) continue;
    normalized.assign(text.substr(raw.begin, raw.end - raw.begin));
    if (normalizer_) normalizer_->Normalize(&normalized);
    for (const TextSpan& span : added_.SplitNormalized(normalized)) {
      if (span.id) {
        ids.push_back(*span.id);
        continue;
      }
      if (span.end == span.begin) continue;
      pieces.clear();
      pieces.push_back({normalized.substr(span.begin, span.end - span.begin),
                        raw.begin == 0 && span.begin == 0});
      if (pre_tokenizer_) pre_tokenizer_->PreTokenize(&pieces);
      for (const Piece& p : pieces) model_->Tokenize(p.text, &ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), frame_.suffix.begin(), frame_.suffix.end());
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* added = added_.FindById(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
      continue;
    }
    const std::string* token = model_->IdToToken(id);
    if (token == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the vocabulary"));
    }
    tokens.push_back(*token);
  }
  if (decoder_ == nullptr) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) absl::StrAppend(&out, i ? " " : "", tokens[i]);
    return out;
  }
  decoder_->DecodeChain(&tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  const std::string* token = nullptr;
  if (const AddedToken* added = added_.FindById(id)) {
    token = &added->content;  // through the decoder too, as Decode sends it
  } else {
    token = model_->IdToToken(id);
  }
  if (token == nullptr) return "";
  if (decoder_ == nullptr) return " " + *token;  // tokens are joined with spaces
  return decoder_->PieceBytes(*token, /*after_fuse=*/false);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (std::optional<int32_t> id = added_.FindByContent(token)) return id;
  return model_->TokenToId(token);
}

std::optional<std::string_view> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = added_.FindById(id)) return added->content;
  if (const std::string* token = model_->IdToToken(id)) return *token;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_.FindById(id);
  return added != nullptr && added->special;
}

}  // namespace ridge
