#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {
namespace {

constexpr char kWhere[] = "tokenizer.json model";
// Words longer than this are not cached: they are rare, and would crowd out common ones.
constexpr size_t kMaxCachedWordBytes = 256;

// Merges are "a b" strings (older files) or ["a", "b"] pairs (newer files).
absl::Status ParseMerge(const Json& m, std::string* a, std::string* b) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(kWhere, ": malformed merge '", s, "'"));
    }
    *a = s.substr(0, space);
    *b = s.substr(space + 1);
    return absl::OkStatus();
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *a = m[0].get<std::string>();
    *b = m[1].get<std::string>();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(kWhere, ": malformed merge ", m.dump()));
}

// One symbol of a word being merged, linked to its live neighbours.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t bytes;  // 0 once merged into its left neighbour
};

struct QueuedMerge {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // std::priority_queue pops the largest: invert so the lowest rank, then leftmost, comes first.
  bool operator<(const QueuedMerge& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model) {
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return absl::InvalidArgumentError(
        "tokenizer.json model: BPE dropout is not supported (it makes encoding random)");
  }
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return FieldError(kWhere, "vocab", "an object");
  if (vocab->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, ": the vocabulary is empty"));
  }
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, ": vocab entry '", it.key(), "' has no valid id"));
    }
    max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
  }
  // Ids index a dense table; a file with ids far beyond its size (holes or a hostile file)
  // would make that table huge.
  if (max_id >= static_cast<int64_t>(vocab->size()) * 2 + 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhere, ": vocab ids reach ", max_id, " but there are only ", vocab->size(), " entries"));
  }
  bpe->id_to_token_.resize(max_id + 1);
  bpe->id_present_.resize(max_id + 1);
  bpe->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    if (bpe->id_present_[id]) {  // two tokens for one id: decoding could not tell them apart
      return absl::InvalidArgumentError(absl::StrCat(kWhere, ": vocab entries '",
                                                     bpe->id_to_token_[id], "' and '", it.key(),
                                                     "' share the id ", id));
    }
    bpe->vocab_[it.key()] = id;
    bpe->id_to_token_[id] = it.key();
    bpe->id_present_[id] = true;
  }

  ASSIGN_OR_RETURN(bpe->continuing_subword_prefix_,
                   GetOptionalString(model, kWhere, "continuing_subword_prefix", ""));
  ASSIGN_OR_RETURN(bpe->end_of_word_suffix_,
                   GetOptionalString(model, kWhere, "end_of_word_suffix", ""));
  ASSIGN_OR_RETURN(bpe->fuse_unk_, GetBool(model, kWhere, "fuse_unk", false));
  ASSIGN_OR_RETURN(bpe->byte_fallback_, GetBool(model, kWhere, "byte_fallback", false));
  ASSIGN_OR_RETURN(bpe->ignore_merges_, GetBool(model, kWhere, "ignore_merges", false));
  ASSIGN_OR_RETURN(std::string unk, GetOptionalString(model, kWhere, "unk_token", ""));
  if (!unk.empty()) {
    auto it = bpe->vocab_.find(unk);
    if (it == bpe->vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, ": unk_token '", unk, "' is not in the vocabulary"));
    }
    bpe->unk_id_ = it->second;
  }

  auto merges = model.find("merges");
  if (merges != model.end() && !merges->is_null()) {
    if (!merges->is_array()) return FieldError(kWhere, "merges", "an array");
    bpe->merges_.reserve(merges->size());
    const size_t prefix_len = bpe->continuing_subword_prefix_.size();
    std::string a, b;
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      RETURN_IF_ERROR(ParseMerge((*merges)[rank], &a, &b));
      auto ia = bpe->vocab_.find(a);
      auto ib = bpe->vocab_.find(b);
      if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(kWhere, ": merge '", a, " ", b, "' uses a token not in the vocabulary"));
      }
      // The right part loses its continuation prefix when joined, as in `tokenizers`.
      const std::string joined =
          a + (prefix_len > 0 && b.compare(0, prefix_len, bpe->continuing_subword_prefix_) == 0
                   ? b.substr(prefix_len)
                   : b);
      auto in = bpe->vocab_.find(joined);
      if (in == bpe->vocab_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(kWhere, ": merge '", a, " ", b, "' makes '",
                                                       joined,
                                                       "', which is not in the vocabulary"));
      }
      // A repeated pair keeps its last rank, like the HashMap `tokenizers` collects into.
      bpe->merges_[PairKey(ia->second, ib->second)] = {static_cast<int32_t>(rank), in->second};
    }
  }

  if (bpe->byte_fallback_) {
    bpe->byte_ids_.assign(256, -1);
    char name[8];
    for (int byte = 0; byte < 256; ++byte) {
      std::snprintf(name, sizeof(name), "<0x%02X>", byte);
      auto it = bpe->vocab_.find(name);
      if (it != bpe->vocab_.end()) bpe->byte_ids_[byte] = it->second;
    }
  }
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(AsAbsl(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(AsAbsl(word));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable && cache_.Lookup(word, out)) return;
  const size_t first = out->size();
  MergeWord(word, out);
  if (cacheable) cache_.Insert(word, out->data() + first, out->size() - first);
}

void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* out) const {
  // Initial symbols: one per character (with prefix/suffix decorations), byte tokens for
  // characters outside the vocabulary when byte_fallback is on, unk otherwise.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id, int32_t bytes) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, bytes});
  };
  // An unknown character waiting to be emitted (fuse_unk extends it); GCC's
  // maybe-uninitialized analysis trips over std::optional here, hence the flag.
  bool has_unk = false;
  int32_t unk_bytes = 0;
  std::string decorated;
  size_t pos = 0;
  while (pos < word.size()) {
    size_t end = pos + 1;
    while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) ++end;
    const std::string_view ch = word.substr(pos, end - pos);
    const bool is_first = pos == 0;
    const bool is_last = end == word.size();
    const auto byte_len = static_cast<int32_t>(ch.size());
    std::string_view key = ch;
    if ((!is_first && !continuing_subword_prefix_.empty()) ||
        (is_last && !end_of_word_suffix_.empty())) {
      decorated.clear();
      if (!is_first) decorated += continuing_subword_prefix_;
      decorated += ch;
      if (is_last) decorated += end_of_word_suffix_;
      key = decorated;
    }
    pos = end;
    auto it = vocab_.find(AsAbsl(key));
    if (it != vocab_.end()) {
      if (has_unk) {
        add(*unk_id_, unk_bytes);
        has_unk = false;
      }
      add(it->second, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : key) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        // Like `tokenizers`, byte tokens go in without first flushing a pending unk.
        for (char c : key) add(byte_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (has_unk && fuse_unk_) {
        unk_bytes += byte_len;
      } else {
        if (has_unk) add(*unk_id_, unk_bytes);
        has_unk = true;
        unk_bytes = byte_len;
      }
    }
  }
  if (has_unk) add(*unk_id_, unk_bytes);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<QueuedMerge> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    auto it = merges_.find(PairKey(symbols[i].id, symbols[i + 1].id));
    if (it != merges_.end()) {
      queue.push({it->second.rank, static_cast<int32_t>(i), it->second.new_id});
    }
  }
  const auto size = static_cast<int32_t>(symbols.size());
  while (!queue.empty()) {
    const QueuedMerge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.bytes == 0 || left.next == -1) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    // Skip entries made stale by an earlier merge of either symbol.
    auto current = merges_.find(PairKey(left.id, right.id));
    if (current == merges_.end() || current->second.new_id != top.new_id) continue;

    left.id = top.new_id;
    left.bytes += right.bytes;
    left.next = right.next;
    symbols[right_pos].bytes = 0;
    if (right.next >= 0 && right.next < size) symbols[right.next].prev = top.pos;

    if (left.prev >= 0) {
      auto it = merges_.find(PairKey(symbols[left.prev].id, left.id));
      if (it != merges_.end()) queue.push({it->second.rank, left.prev, it->second.new_id});
    }
    if (left.next >= 0 && left.next < size) {
      auto it = merges_.find(PairKey(left.id, symbols[left.next].id));
      if (it != merges_.end()) queue.push({it->second.rank, top.pos, it->second.new_id});
    }
  }
  for (const Symbol& s : symbols) {
    if (s.bytes != 0) out->push_back(s.id);
  }
}

}  // namespace ridge
