#include "models/model_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/elementwise.h"
#include "models/step_input.h"

namespace ridge {

PickedToken PickOnHost(const TokenPick& pick, std::span<const float> row) {
  PickedToken out;
  out.token = pick.sampler->SampleWithUniform(row, pick.prompt, pick.generated, pick.uniform);
  if (pick.logprobs) {
    out.logprob = TokenLogprob(row, out.token);
    TopLogprobs(row, pick.top_logprobs, &out.top);
  }
  return out;
}

int64_t ScoredRows(std::span<const TokenPick> picks) {
  int64_t rows = 0;
  for (const TokenPick& pick : picks) rows += static_cast<int64_t>(pick.score_next.size());
  return rows;
}

PickedToken ScoreOnHost(std::span<const float> row, int32_t next, int32_t top) {
  PickedToken out;
  out.token = next;
  out.logprob = TokenLogprob(row, next);
  TopLogprobs(row, top, &out.top);
  // NaN reads as -inf, as the samplers read it.
  auto clean = [](float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; };
  const float chosen = clean(row[next]);
  out.rank = static_cast<int32_t>(
      std::count_if(row.begin(), row.end(), [&](float x) { return clean(x) >= chosen; }));
  return out;
}

absl::Status ModelBackend::ForwardGreedy(std::span<const SlotChunk> chunks,
                                         std::vector<int32_t>* next_tokens) {
  std::vector<float> logits;
  RETURN_IF_ERROR(Forward(chunks, LogitsFor::kLastToken, &logits));
  next_tokens->clear();
  if (logits.empty()) return absl::OkStatus();  // a tensor-parallel rank that answers nothing
  const int64_t vocab = spec().vocab_size;
  next_tokens->resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    (*next_tokens)[i] = GreedyToken(std::span<const float>(logits).subspan(i * vocab, vocab));
  }
  return absl::OkStatus();
}

absl::Status ModelBackend::ForwardSample(std::span<const SlotChunk> chunks,
                                         std::span<const TokenPick> picks,
                                         std::vector<PickedToken>* picked) {
  RETURN_IF_ERROR(ValidatePicks(chunks, picks));
  // Scored rows need every row's logits; otherwise each chunk's last row is enough.
  const bool all_rows = ScoredRows(picks) > 0;
  std::vector<float> logits;
  RETURN_IF_ERROR(
      Forward(chunks, all_rows ? LogitsFor::kAllTokens : LogitsFor::kLastToken, &logits));
  picked->clear();
  if (logits.empty()) return absl::OkStatus();  // a tensor-parallel rank that answers nothing
  const int64_t vocab = spec().vocab_size;
  auto row = [&](int64_t r) { return std::span<const float>(logits).subspan(r * vocab, vocab); };
  picked->assign(chunks.size(), PickedToken{});
  int64_t first_row = 0;  // the chunk's first row in `logits` (all rows)
  for (size_t i = 0; i < chunks.size(); ++i) {
    const TokenPick& pick = picks[i];
    const int64_t tokens = static_cast<int64_t>(chunks[i].tokens.size());
    const int64_t last_row = all_rows ? first_row + tokens - 1 : static_cast<int64_t>(i);
    if (pick.sampler != nullptr) (*picked)[i] = PickOnHost(pick, row(last_row));
    for (size_t r = 0; r < pick.score_next.size(); ++r) {
      (*picked)[i].scored.push_back(
          ScoreOnHost(row(first_row + r), pick.score_next[r], pick.score_top_logprobs));
    }
    first_row += tokens;
  }
  return absl::OkStatus();
}

absl::Status ModelBackend::ForwardPick(std::span<const SlotChunk> chunks,
                                       std::span<const TokenPick> picks,
                                       std::vector<PickedToken>* picked) {
  const bool all_greedy = std::all_of(picks.begin(), picks.end(), [](const TokenPick& pick) {
    return pick.score_next.empty() &&
           (pick.sampler == nullptr ||
            (pick.sampler->IsPlainArgmax(pick.generated.size()) && !pick.logprobs));
  });
  if (!all_greedy) return ForwardSample(chunks, picks, picked);
  RETURN_IF_ERROR(ValidatePicks(chunks, picks));
  std::vector<int32_t> tokens;
  RETURN_IF_ERROR(ForwardGreedy(chunks, &tokens));
  picked->assign(chunks.size(), PickedToken{});
  for (size_t i = 0; i < chunks.size(); ++i) (*picked)[i].token = tokens[i];
  return absl::OkStatus();
}

absl::Status ModelBackend::ValidatePicks(std::span<const SlotChunk> chunks,
                                         std::span<const TokenPick> picks) const {
  if (picks.size() != chunks.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(picks.size(), " token picks for ", chunks.size(), " sequences"));
  }
  const int64_t vocab = spec().vocab_size;
  for (size_t i = 0; i < picks.size(); ++i) {
    const TokenPick& pick = picks[i];
    if (pick.score_next.size() > chunks[i].tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": ", pick.score_next.size(),
                                                     " scored rows in a chunk of ",
                                                     chunks[i].tokens.size(), " tokens"));
    }
    if (pick.score_top_logprobs < 0 || pick.score_top_logprobs > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": score_top_logprobs ",
                                                     pick.score_top_logprobs, " must be 0 to ",
                                                     kMaxTopLogprobs));
    }
    for (int32_t token : pick.score_next) {
      if (token < 0 || token >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", i, ": scored token ", token, " is outside the vocabulary"));
      }
    }
    if (pick.sampler == nullptr) continue;
    if (pick.sampler->vocab_size() != vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, ": its sampler is for a vocabulary of ",
                       pick.sampler->vocab_size(), " tokens, the model has ", vocab));
    }
    if (pick.top_logprobs < 0 || pick.top_logprobs > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", i, ": top_logprobs ", pick.top_logprobs, " must be 0 to ", kMaxTopLogprobs));
    }
    if (!(pick.uniform >= 0.0 && pick.uniform < 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, ": the draw's uniform ", pick.uniform, " is not in [0, 1)"));
    }
    for (std::span<const int32_t> history : {pick.prompt, pick.generated}) {
      for (int32_t token : history) {
        if (token < 0 || token >= vocab) {
          return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": history token ", token,
                                                         " is outside the vocabulary"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ModelBackend::CheckSlot(int64_t slot) const {
  if (slot >= 0 && slot < num_slots()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("slot ", slot, " is outside [0, ", num_slots(), ")"));
}

absl::Status ModelBackend::CheckKvBlock(int32_t block) const {
  if (block >= 0 && block < num_kv_blocks()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("KV block ", block, " is outside [0, ", num_kv_blocks(), ")"));
}

absl::Status ModelBackend::CopyKvBlock(int32_t from, int32_t to) {
  return absl::FailedPreconditionError(absl::StrCat("the ", std::string(name()),
                                                    " backend has no KV cache (copying block ",
                                                    from, " to ", to, ")"));
}

absl::Status ModelBackend::ExportSlot(int64_t slot, std::string*) {
  return absl::UnimplementedError(
      absl::StrCat("the ", std::string(name()), " backend cannot export slot ", slot));
}

absl::Status ModelBackend::ImportSlot(int64_t slot, std::string_view, int64_t) {
  return absl::UnimplementedError(
      absl::StrCat("the ", std::string(name()), " backend cannot import slot ", slot));
}

absl::Status ModelBackend::ExportKvBlock(int32_t block, std::string*) {
  return absl::UnimplementedError(
      absl::StrCat("the ", std::string(name()), " backend cannot export KV block ", block));
}

absl::Status ModelBackend::ImportKvBlock(int32_t block, std::string_view) {
  return absl::UnimplementedError(
      absl::StrCat("the ", std::string(name()), " backend cannot import KV block ", block));
}

absl::Status ModelBackend::CheckImport(std::string_view what, std::string_view bytes,
                                       int64_t expected) const {
  if (static_cast<int64_t>(bytes.size()) == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(std::string(what), " of ", bytes.size(),
                                                 " bytes; this backend's are ", expected));
}

absl::Status ModelBackend::ValidateChunks(std::span<const SlotChunk> chunks) const {
  const int64_t vocab = spec().vocab_size;
  const int64_t block_size = kv_layout().empty() ? 0 : kv_layout().block_size;
  const int64_t total_blocks = num_kv_blocks();
  std::vector<bool> used(num_slots(), false);
  // A block may sit in several tables (a shared prefix, read only), but one a chunk writes into
  // belongs to that chunk alone in the step. A decode step's tables hold every block of every
  // sequence (about 10^5 at 16K context), so the blocks written are marked in a bitmap and kept
  // with their writer in a short list, and every check is cheap where it passes.
  std::vector<uint64_t> written((total_blocks + 63) / 64, 0);
  std::vector<std::pair<int32_t, int32_t>> writers;  // (block, sequence)
  auto is_written = [&](int32_t block) { return (written[block / 64] >> (block % 64)) & 1u; };
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SlotChunk& chunk = chunks[i];
    if (absl::Status slot = CheckSlot(chunk.slot); !slot.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": ", slot.message()));
    }
    if (used[chunk.slot]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, ": slot ", chunk.slot, " appears twice in one step"));
    }
    used[chunk.slot] = true;
    RETURN_IF_ERROR(ValidateSequenceInput(i, chunk.tokens, chunk.solver, vocab));
    for (int32_t block : chunk.kv_blocks) {
      if (block >= 0 && block < total_blocks) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, ": ", CheckKvBlock(block).message()));
    }
    if (block_size == 0 || chunk.tokens.empty()) continue;
    const int64_t position = SlotPosition(chunk.slot);
    const int64_t first = position / block_size;
    const int64_t last = (position + static_cast<int64_t>(chunk.tokens.size()) - 1) / block_size;
    for (int64_t e = first; e <= last && e < static_cast<int64_t>(chunk.kv_blocks.size()); ++e) {
      const int32_t block = chunk.kv_blocks[e];
      if (is_written(block)) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": KV block ", block,
                                                       " is written by two sequences in one step"));
      }
      written[block / 64] |= uint64_t{1} << (block % 64);
      writers.emplace_back(block, static_cast<int32_t>(i));
    }
  }
  if (writers.empty()) return absl::OkStatus();
  std::sort(writers.begin(), writers.end());
  for (size_t i = 0; i < chunks.size(); ++i) {
    for (int32_t block : chunks[i].kv_blocks) {
      if (!is_written(block)) continue;
      const int32_t writer =
          std::lower_bound(writers.begin(), writers.end(), std::make_pair(block, int32_t{0}))
              ->second;
      if (writer != static_cast<int32_t>(i)) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": KV block ", block,
                                                       " is read while sequence ", writer,
                                                       " writes into it in the same step"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ridge
