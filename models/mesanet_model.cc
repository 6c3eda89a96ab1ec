#include "models/mesanet_model.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "kernels/cg_solver.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/mesa_step.h"
#include "models/checkpoint.h"

namespace ridge {
namespace {

// FLA's l2norm adds this to the sum of squares of q and k.
constexpr float kL2NormEps = 1e-6f;

}  // namespace

// Activations of every token in the call, row r belonging to chunk row_chunk[r].
struct MesaNetModel::Batch {
  int64_t rows = 0;
  std::vector<int64_t> chunk_offset;  // first row of each chunk
  std::vector<float> hidden;          // [rows, C] residual stream
  std::vector<float> normed;          // [rows, C]
  std::vector<float> proj;            // [rows, P]: q k v (g) a b
  std::vector<float> q, k;            // [rows, K] after conv, silu, l2 norm
  std::vector<float> attn_out;        // [rows, K]
  std::vector<float> mlp;             // [rows, 2I]
  std::vector<float> act;             // [rows, I]
};

namespace {

// The config of model folder `dir` from its config.json's contents; errors name the file.
absl::StatusOr<MesaNetConfig> FolderConfig(const std::filesystem::path& dir,
                                           const nlohmann::json& json) {
  auto config = ParseMesaNetConfig(json);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat((dir / "config.json").string(), ": ", config.status().message()));
  }
  return config;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MesaNetModel>> MesaNetModel::Load(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(const MesaNetConfig config, FolderConfig(dir, checkpoint->config()));
  ASSIGN_OR_RETURN(MesaNetWeights weights, LoadMesaNetWeights(*checkpoint, config));
  return std::make_unique<MesaNetModel>(config, std::move(weights));
}

absl::StatusOr<std::unique_ptr<MesaNetModel>> MesaNetModel::Random(const std::filesystem::path& dir,
                                                                   uint64_t seed) {
  ASSIGN_OR_RETURN(const nlohmann::json json, ReadJsonFile(dir / "config.json"));
  ASSIGN_OR_RETURN(const MesaNetConfig config, FolderConfig(dir, json));
  return std::make_unique<MesaNetModel>(config, RandomMesaNetWeights(config, seed));
}

MesaNetModel::MesaNetModel(MesaNetConfig config, MesaNetWeights weights)
    : config_(config), weights_(std::move(weights)) {
  RIDGE_CHECK(static_cast<int64_t>(weights_.layers.size()) == config_.num_hidden_layers);
}

absl::Status MesaNetModel::Forward(std::span<const SequenceChunk> chunks, LogitsFor which,
                                   std::vector<float>* logits) const {
  const int64_t c = config_.hidden_size, v = config_.vocab_size;
  const size_t state_floats = MesaState(config_).data().size();
  Batch batch;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& chunk = chunks[i];
    if (chunk.state == nullptr || chunk.state->data().size() != state_floats) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": state of another model"));
    }
    if (chunk.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": no tokens to process"));
    }
    RETURN_IF_ERROR(ValidateSolverOptions(chunk.solver, kSolverIterationLimit));
    for (int32_t token : chunk.tokens) {
      if (token < 0 || token >= v) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": token id ", token,
                                                       " is outside the vocabulary [0, ", v, ")"));
      }
    }
    batch.chunk_offset.push_back(batch.rows);
    batch.rows += static_cast<int64_t>(chunk.tokens.size());
  }

  batch.hidden.resize(batch.rows * c);
  int64_t row = 0;
  for (const SequenceChunk& chunk : chunks) {
    for (int32_t token : chunk.tokens) {
      std::memcpy(&batch.hidden[row++ * c], &weights_.embeddings[token * c], c * sizeof(float));
    }
  }
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
    RunLayer(layer, chunks, batch);
  }
  for (const SequenceChunk& chunk : chunks) chunk.state->AddTokens(chunk.tokens.size());

  // Only the rows whose logits are wanted go through the final norm and the vocabulary product.
  std::vector<float> selected;
  int64_t out_rows = batch.rows;
  const float* final_input = batch.hidden.data();
  if (which == LogitsFor::kLastToken) {
    out_rows = static_cast<int64_t>(chunks.size());
    selected.resize(out_rows * c);
    for (size_t i = 0; i < chunks.size(); ++i) {
      const int64_t last =
          batch.chunk_offset[i] + static_cast<int64_t>(chunks[i].tokens.size()) - 1;
      std::memcpy(&selected[i * c], &batch.hidden[last * c], c * sizeof(float));
    }
    final_input = selected.data();
  }
  std::vector<float> normed(out_rows * c);
  RmsNormRows(final_input, weights_.final_norm.data(), out_rows, c, config_.norm_eps,
              normed.data());
  logits->resize(out_rows * v);
  MatMulTransposed(normed.data(), out_rows, c, weights_.output_matrix().data(), v, logits->data(),
                   false);
  return absl::OkStatus();
}

void MesaNetModel::RunLayer(int64_t layer, std::span<const SequenceChunk> chunks,
                            Batch& batch) const {
  const MesaLayerWeights& w = weights_.layers[layer];
  const int64_t rows = batch.rows, c = config_.hidden_size, k = config_.key_dim();
  const int64_t h = config_.num_heads, d = config_.head_dim, inter = config_.intermediate_size;
  const int64_t p = static_cast<int64_t>(w.in_proj.size()) / c;
  const float eps = static_cast<float>(config_.norm_eps);

  batch.normed.resize(rows * c);
  RmsNormRows(batch.hidden.data(), w.attn_norm.data(), rows, c, eps, batch.normed.data());
  batch.proj.resize(rows * p);
  MatMulTransposed(batch.normed.data(), rows, c, w.in_proj.data(), p, batch.proj.data(), false);

  ShortConvolution(layer, chunks, batch);
  Recurrence(layer, chunks, batch);

  // Output norm per head (one weight shared by all heads), optionally gated by silu(g).
  RmsNormRows(batch.attn_out.data(), w.o_norm.data(), rows * h, d, eps, batch.attn_out.data());
  if (config_.use_output_gate) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = &batch.proj[r * p + 3 * k];
      float* o = &batch.attn_out[r * k];
      for (int64_t i = 0; i < k; ++i) o[i] *= Silu(g[i]);
    }
  }
  MatMulTransposed(batch.attn_out.data(), rows, k, w.o_proj.data(), c, batch.hidden.data(), true);

  RmsNormRows(batch.hidden.data(), w.mlp_norm.data(), rows, c, eps, batch.normed.data());
  batch.mlp.resize(rows * 2 * inter);
  MatMulTransposed(batch.normed.data(), rows, c, w.gate_up_proj.data(), 2 * inter, batch.mlp.data(),
                   false);
  batch.act.resize(rows * inter);
  SwiGluRows(batch.mlp.data(), rows, inter, batch.act.data());
  MatMulTransposed(batch.act.data(), rows, inter, w.down_proj.data(), c, batch.hidden.data(), true);
}

// Causal depthwise convolution over the raw q/k projections, continuing each sequence from the
// tail of raw values kept in its state, then SiLU and the per-head L2 norm.
void MesaNetModel::ShortConvolution(int64_t layer, std::span<const SequenceChunk> chunks,
                                    Batch& batch) const {
  const MesaLayerWeights& w = weights_.layers[layer];
  const int64_t k = config_.key_dim(), width = config_.conv_size, tail_rows = width - 1;
  const int64_t p = static_cast<int64_t>(w.in_proj.size()) / config_.hidden_size;
  batch.q.resize(batch.rows * k);
  batch.k.resize(batch.rows * k);

  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int64_t first = batch.chunk_offset[ci];
    const int64_t n = static_cast<int64_t>(chunks[ci].tokens.size());
    MesaState& state = *chunks[ci].state;
    for (int which = 0; which < 2; ++which) {
      const float* weight = which == 0 ? w.q_conv.data() : w.k_conv.data();
      float* tail = which == 0 ? state.q_tail(layer) : state.k_tail(layer);
      float* out = which == 0 ? batch.q.data() : batch.k.data();
      const int64_t column = which * k;  // q columns first, then k
      // Raw value of channel ch at chunk position s (s < 0 reaches into the tail).
      auto raw = [&](int64_t s, int64_t ch) {
        return s >= 0 ? batch.proj[(first + s) * p + column + ch] : tail[(tail_rows + s) * k + ch];
      };
#pragma omp parallel for if (n * k > 16384)
      for (int64_t t = 0; t < n; ++t) {
        float* o = out + (first + t) * k;
        for (int64_t ch = 0; ch < k; ++ch) {
          float sum = 0.0f;
          for (int64_t j = 0; j < width; ++j)
            sum += weight[ch * width + j] * raw(t - tail_rows + j, ch);
          o[ch] = Silu(sum);
        }
      }
      // The new tail is the last W-1 raw values of (old tail ++ chunk).
      std::vector<float> new_tail(tail_rows * k);
      for (int64_t r = 0; r < tail_rows; ++r) {
        for (int64_t ch = 0; ch < k; ++ch) new_tail[r * k + ch] = raw(n - tail_rows + r, ch);
      }
      std::copy(new_tail.begin(), new_tail.end(), tail);
    }
  }
  L2NormalizeGroups(batch.q.data(), batch.rows * config_.num_heads, config_.head_dim, kL2NormEps);
  L2NormalizeGroups(batch.k.data(), batch.rows * config_.num_heads, config_.head_dim, kL2NormEps);
}

// Per (sequence, head): the decayed rank-1 updates of Hs and Gs, the CG solve and the readout,
// token after token. Pairs are independent, so they run in parallel.
void MesaNetModel::Recurrence(int64_t layer, std::span<const SequenceChunk> chunks,
                              Batch& batch) const {
  const MesaLayerWeights& w = weights_.layers[layer];
  const int64_t k = config_.key_dim(), h = config_.num_heads, d = config_.head_dim;
  const int64_t p = static_cast<int64_t>(w.in_proj.size()) / config_.hidden_size;
  const int64_t v_column = 2 * k, a_column = p - 2 * h, b_column = p - h;
  batch.attn_out.resize(batch.rows * k);

  const int64_t pairs = static_cast<int64_t>(chunks.size()) * h;
  std::vector<SolverStats> pair_stats(pairs);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t ci = pair / h, head = pair % h;
    const SequenceChunk& chunk = chunks[ci];
    const CgStart start = chunk.phase == SolvePhase::kDecode ? CgStart::kJacobi : CgStart::kZero;
    float* hs = chunk.state->hs(layer) + head * d * d;
    float* gs = chunk.state->gs(layer) + head * d * d;
    std::vector<float> scratch(4 * d);
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = batch.chunk_offset[ci] + t;
      const MesaHeadInputs in{
          .q = &batch.q[r * k + head * d],
          .k = &batch.k[r * k + head * d],
          .v = &batch.proj[r * p + v_column + head * d],
          .lambda = w.lambda.data() + head * d,
          .gamma = Sigmoid(batch.proj[r * p + a_column + head] + w.a_bias[head]),
          .beta = Sigmoid(batch.proj[r * p + b_column + head] + w.b_bias[head]),
      };
      pair_stats[pair].Add(MesaHeadStep(in, static_cast<int>(d), chunk.solver, start, hs, gs,
                                        &batch.attn_out[r * k + head * d], scratch.data()));
    }
  }
  for (int64_t pair = 0; pair < pairs; ++pair) {
    if (chunks[pair / h].stats != nullptr) chunks[pair / h].stats->Merge(pair_stats[pair]);
  }
}

}  // namespace ridge
