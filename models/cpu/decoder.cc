#include "models/cpu/decoder.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "kernels/elementwise.h"
#include "models/step_input.h"

namespace ridge {

CpuDecoder::CpuDecoder(ModelSpec spec, DecoderWeights weights, int64_t kv_block_size,
                       std::optional<DecoderRank> rank)
    : spec_(std::move(spec)),
      weights_(std::move(weights)),
      recurrent_(PlanRecurrentLayout(spec_)),
      kv_(PlanKvLayout(spec_, kv_block_size)),
      rank_(rank) {
  RIDGE_CHECK(weights_.layers.size() == spec_.layers.size());
  RIDGE_CHECK(!rank_ || (rank_->collective != nullptr && rank_->vocab.end() <= spec_.vocab_size));
}

absl::Status CpuDecoder::Validate(std::span<const CpuSequence> sequences,
                                  const float* kv_storage) const {
  const int64_t vocab = spec_.vocab_size;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const CpuSequence& s = sequences[i];
    RETURN_IF_ERROR(ValidateSequenceInput(i, s.tokens, s.solver, vocab));
    if (recurrent_.floats_per_slot > 0 && s.state == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": no recurrent state"));
    }
    if (kv_.empty()) continue;
    if (kv_storage == nullptr) return absl::InvalidArgumentError("no KV cache storage");
    const int64_t end = s.position + static_cast<int64_t>(s.tokens.size());
    const int64_t needed_blocks = (end - 1) / kv_.block_size + 1;
    if (static_cast<int64_t>(s.kv_blocks.size()) < needed_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": ", s.kv_blocks.size(),
                                                     " KV blocks for ", end, " positions"));
    }
    for (int64_t b = 0; b < needed_blocks; ++b) {
      if (s.kv_blocks[b] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", i, ": KV block table entry ", b, " is ", s.kv_blocks[b]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDecoder::Forward(std::span<const CpuSequence> sequences, float* kv_storage,
                                 LogitsFor which, std::vector<float>* logits) const {
  RETURN_IF_ERROR(Validate(sequences, kv_storage));
  const int64_t c = spec_.hidden_size;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  MixerBatch batch{.sequences = sequences, .kv_storage = kv_storage, .kv_layout = &kv_};
  for (const CpuSequence& s : sequences) {
    batch.first_row.push_back(batch.rows);
    batch.rows += static_cast<int64_t>(s.tokens.size());
  }
  const int64_t rows = batch.rows;
  std::vector<float> hidden(rows * c), normed(rows * c);
  RETURN_IF_ERROR(Embed(sequences, hidden.data()));
  // The whole model adds each mixer's and MLP's output to the residual stream; a rank writes its
  // partial sum apart, adds it up with the other ranks' and then to the residual.
  std::vector<float> partial(rank_ ? rows * c : 0);
  float* const out = rank_ ? partial.data() : hidden.data();
  const auto reduce_into_residual = [&]() -> absl::Status {
    if (!rank_) return absl::OkStatus();
    RETURN_IF_ERROR(rank_->collective->AllReduceSum(partial.data(), rows * c));
    for (int64_t i = 0; i < rows * c; ++i) hidden[i] += partial[i];
    return absl::OkStatus();
  };
  for (const DecoderLayerWeights& layer : weights_.layers) {
    RmsNormRows(hidden.data(), layer.input_norm.data(), rows, c, eps, normed.data());
    std::fill(partial.begin(), partial.end(), 0.0f);  // a rank's mixer adds to zeros
    layer.mixer->Forward(batch, normed.data(), out);
    RETURN_IF_ERROR(reduce_into_residual());
    RmsNormRows(hidden.data(), layer.post_norm.data(), rows, c, eps, normed.data());
    SwiGluMlp(layer.gate_up, layer.down, rows, c, normed.data(), out, /*accumulate=*/!rank_);
    RETURN_IF_ERROR(reduce_into_residual());
  }

  // Only the rows whose logits are wanted go through the final norm and the vocabulary product.
  int64_t out_rows = rows;
  if (which == LogitsFor::kLastToken) {
    out_rows = static_cast<int64_t>(sequences.size());
    for (size_t i = 0; i < sequences.size(); ++i) {
      const int64_t last =
          batch.first_row[i] + static_cast<int64_t>(sequences[i].tokens.size()) - 1;
      std::copy_n(&hidden[last * c], c, &hidden[i * c]);  // rows i <= last: no overlap issue
    }
  }
  RmsNormRows(hidden.data(), weights_.final_norm.data(), out_rows, c, eps, normed.data());
  return Logits(normed.data(), out_rows, logits);
}

absl::Status CpuDecoder::Embed(std::span<const CpuSequence> sequences, float* hidden) const {
  const int64_t c = spec_.hidden_size;
  // A rank holds the rows of its slice of the vocabulary: zeros for the other tokens, then the
  // sum over the ranks.
  const IndexRange vocab = rank_ ? rank_->vocab : IndexRange{0, spec_.vocab_size};
  int64_t row = 0;
  for (const CpuSequence& s : sequences) {
    for (int32_t token : s.tokens) {
      float* out = &hidden[row++ * c];
      if (token >= vocab.first && token < vocab.end()) {
        WeightRowToFloat(weights_.embedding, token - vocab.first, out);
      } else {
        std::fill_n(out, c, 0.0f);
      }
    }
  }
  return rank_ ? rank_->collective->AllReduceSum(hidden, row * c) : absl::OkStatus();
}

absl::Status CpuDecoder::Logits(const float* normed, int64_t rows,
                                std::vector<float>* logits) const {
  const int64_t v = spec_.vocab_size;
  if (!rank_) {
    logits->resize(rows * v);
    MatMulWeights(normed, rows, weights_.head, logits->data(), v, false);
    return absl::OkStatus();
  }
  // Each rank's columns of the logits, gathered on rank 0.
  const IndexRange vocab = rank_->vocab;
  std::vector<float> local(rows * vocab.count);
  MatMulWeights(normed, rows, weights_.head, local.data(), vocab.count, false);
  const bool root = rank_->collective->rank() == 0;
  if (root) {
    logits->resize(rows * v);
  } else {
    logits->clear();
  }
  return rank_->collective->GatherColumns(local.data(), rows, vocab.first, vocab.count,
                                          root ? logits->data() : nullptr, v);
}

void SwiGluMlp(std::span<const WeightMatrix> gate_up, const WeightMatrix& down, int64_t rows,
               int64_t hidden_size, const float* normed, float* out, bool accumulate) {
  const int64_t inter = down.cols;
  std::vector<float> fused(rows * 2 * inter), act(rows * inter);
  int64_t column = 0;
  for (const WeightMatrix& part : gate_up) {
    MatMulWeights(normed, rows, part, fused.data() + column, 2 * inter, false);
    column += part.rows;
  }
  SwiGluRows(fused.data(), rows, static_cast<int>(inter), act.data());
  MatMulWeights(act.data(), rows, down, out, hidden_size, accumulate);
}

}  // namespace ridge
