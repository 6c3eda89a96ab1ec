#include "models/cpu/gka_mixer.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gka_step.h"
#include "kernels/short_convolution.h"

namespace ridge {
namespace {

// The spec's L2 norm adds this to the norm (not to the sum of squares).
constexpr float kL2NormEps = 1e-6f;
// sigmoid(b) + this scales k and v.
constexpr float kBetaEps = 1e-6f;

void L2NormalizeHeads(float* x, int64_t heads, int64_t d) {
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * d;
    double sum = 0.0;
    for (int64_t i = 0; i < d; ++i) sum += double(v[i]) * v[i];
    const float scale = static_cast<float>(1.0 / (std::sqrt(sum) + kL2NormEps));
    for (int64_t i = 0; i < d; ++i) v[i] *= scale;
  }
}

}  // namespace

struct GkaMixer::Activations {
  // Projection columns: q k v (raw, then convolved in place) | a | b | alpha | g.
  int64_t width = 0, a_column = 0, b_column = 0, alpha_column = 0, g_column = 0;
  std::vector<float> proj;  // [rows, width]
  std::vector<float> qkv;   // [rows, (Hq+Hk+Hv)*D] after conv, silu, q/k L2 norms
  std::vector<float> out;   // [rows, Hx*D]
};

GkaMixer::GkaMixer(const GkaSpec& spec, int64_t hidden_size, GkaLayerWeights weights,
                   int64_t state_offset)
    : spec_(spec),
      hidden_size_(hidden_size),
      w_(std::move(weights)),
      state_offset_(state_offset),
      qkv_width_((spec.q_heads + spec.k_heads + spec.v_heads) * spec.head_dim) {}

void GkaMixer::Forward(const MixerBatch& batch, const float* normed, float* hidden) const {
  const int64_t rows = batch.rows, hx = spec_.expanded_heads(), d = spec_.head_dim;
  Activations a;
  a.a_column = qkv_width_;
  a.b_column = a.a_column + hx;
  a.alpha_column = a.b_column + hx;
  a.g_column = a.alpha_column + hx;
  a.width = a.g_column + hx * d;
  a.proj.resize(rows * a.width);
  int64_t column = 0;
  for (const WeightMatrix* w :
       {&w_.q_proj, &w_.k_proj, &w_.v_proj, &w_.a_proj, &w_.b_proj, &w_.alpha_proj, &w_.g_proj}) {
    MatMulWeights(normed, rows, *w, a.proj.data() + column, a.width, false);
    column += w->rows;
  }
  Convolution(batch, a);
  Recurrence(batch, a);

  // o_norm per head, the output gate silu(g), then o_proj into the residual stream.
  const int64_t out_width = hx * d;
  RmsNormRows(a.out.data(), w_.o_norm.data(), rows * hx, static_cast<int>(d),
              static_cast<float>(spec_.norm_eps), a.out.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = &a.proj[r * a.width + a.g_column];
    float* o = &a.out[r * out_width];
    for (int64_t i = 0; i < out_width; ++i) o[i] *= Silu(g[i]);
  }
  MatMulWeights(a.out.data(), rows, w_.o_proj, hidden, hidden_size_, true);
}

// Causal depthwise convolution of the raw q/k/v projections, continuing each sequence from the
// tail kept in its state (w[c, W-1] multiplies the current token), then SiLU and the L2 norms
// of the q and k heads.
void GkaMixer::Convolution(const MixerBatch& batch, Activations& a) const {
  const int64_t channels = qkv_width_, d = spec_.head_dim, hx = spec_.expanded_heads();
  a.qkv.resize(batch.rows * channels);
  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const int64_t first = batch.first_row[ci];
    const int64_t n = static_cast<int64_t>(batch.sequences[ci].tokens.size());
    float* tail = batch.sequences[ci].state + state_offset_ + 2 * hx * d * d;
    CausalConvSilu(&a.proj[first * a.width], a.width, n, channels, w_.conv.data(), spec_.conv_size,
                   tail, &a.qkv[first * channels], channels);
  }
#pragma omp parallel for if (batch.rows * channels > 16384)
  for (int64_t r = 0; r < batch.rows; ++r) {
    float* row = &a.qkv[r * channels];
    L2NormalizeHeads(row, spec_.q_heads, d);
    L2NormalizeHeads(row + spec_.q_heads * d, spec_.k_heads, d);
  }
}

// Per (sequence, expanded head), token after token: the gates, the state update, the solve and
// the readout.
void GkaMixer::Recurrence(const MixerBatch& batch, Activations& a) const {
  const int64_t hx = spec_.expanded_heads(), d = spec_.head_dim, out_width = hx * d;
  const int64_t k_start = spec_.q_heads * d, v_start = k_start + spec_.k_heads * d;
  const int64_t q_group = hx / spec_.q_heads, k_group = hx / spec_.k_heads,
                v_group = hx / spec_.v_heads;
  a.out.resize(batch.rows * out_width);
  ForEachSequenceHead(batch, hx, [&](int64_t ci, int64_t head, SolverStats& stats) {
    const CpuSequence& seq = batch.sequences[ci];
    float* hs = seq.state + state_offset_ + head * d * d;
    float* ss = hs + hx * d * d;
    std::vector<float> scratch(4 * d);
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = batch.first_row[ci] + t;
      const float* qkv = &a.qkv[r * qkv_width_];
      const float* proj = &a.proj[r * a.width];
      const float decay_input = proj[a.a_column + head] + w_.dt_bias[head];
      const GkaHeadInputs in{
          .q = qkv + (head / q_group) * d,
          .k = qkv + k_start + (head / k_group) * d,
          .v = qkv + v_start + (head / v_group) * d,
          .beta = Sigmoid(proj[a.b_column + head] + w_.b_bias[head]) + kBetaEps,
          .alpha = Sigmoid(proj[a.alpha_column + head] + w_.alpha_bias[head]),
          .log_decay = -w_.decay_rate[head] * Softplus(decay_input),
          .ridge_strength = static_cast<float>(spec_.ridge_strength),
          .solve = spec_.num_iter > 0,
      };
      const std::optional<SolveResult> solve =
          GkaHeadStep(in, static_cast<int>(d), seq.solver, hs, ss, &a.out[r * out_width + head * d],
                      scratch.data());
      if (solve.has_value()) stats.Add(*solve);
    }
  });
}

}  // namespace ridge
