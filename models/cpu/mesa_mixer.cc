#include "models/cpu/mesa_mixer.h"

#include <algorithm>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/mesa_step.h"
#include "kernels/short_convolution.h"
#include "kernels/weight_gemm.h"

namespace ridge {
namespace {

// FLA's l2norm adds this to the sum of squares of q and k.
constexpr float kL2NormEps = 1e-6f;

}  // namespace

struct MesaMixer::Activations {
  int64_t p = 0;            // projection width: q k v (g) a b
  std::vector<float> proj;  // [rows, P]
  std::vector<float> q, k;  // [rows, K] after conv, silu, l2 norm
  std::vector<float> out;   // [rows, K]
};

MesaMixer::MesaMixer(const MesaSpec& spec, int64_t hidden_size, const MesaLayerView* weights,
                     int64_t state_offset)
    : spec_(spec), hidden_size_(hidden_size), w_(weights), state_offset_(state_offset) {}

void MesaMixer::Forward(const MixerBatch& batch, const float* normed, float* hidden) const {
  const int64_t rows = batch.rows, c = hidden_size_;
  const int64_t h = spec_.heads, d = spec_.head_dim, k = h * d;
  Activations a;
  for (const WeightMatrix& part : w_->in_proj) a.p += part.rows;
  a.proj.resize(rows * a.p);
  int64_t column = 0;
  for (const WeightMatrix& part : w_->in_proj) {
    MatMulWeights(normed, rows, part, a.proj.data() + column, a.p, false);
    column += part.rows;
  }

  ShortConvolution(batch, a);
  Recurrence(batch, a);

  // Output norm per head (one weight shared by all heads), optionally gated by silu(g).
  const float eps = static_cast<float>(spec_.norm_eps);
  RmsNormRows(a.out.data(), w_->o_norm.data(), rows * h, d, eps, a.out.data());
  if (spec_.use_output_gate) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = &a.proj[r * a.p + 3 * k];
      float* o = &a.out[r * k];
      for (int64_t i = 0; i < k; ++i) o[i] *= Silu(g[i]);
    }
  }
  MatMulWeights(a.out.data(), rows, w_->o_proj, hidden, c, true);
}

// The short convolutions of the raw q/k projections, continuing each sequence from the tails
// kept in its state, then SiLU and the per-head L2 norm.
void MesaMixer::ShortConvolution(const MixerBatch& batch, Activations& a) const {
  const int64_t k = spec_.heads * spec_.head_dim, width = spec_.conv_size, tail_rows = width - 1;
  const int64_t p = a.p, matrices = 2 * spec_.heads * spec_.head_dim * spec_.head_dim;
  a.q.resize(batch.rows * k);
  a.k.resize(batch.rows * k);

  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const int64_t first = batch.first_row[ci];
    const int64_t n = static_cast<int64_t>(batch.sequences[ci].tokens.size());
    float* tails = batch.sequences[ci].state + state_offset_ + matrices;  // q tail, then k tail
    CausalConvSilu(&a.proj[first * p], p, n, k, w_->q_conv.data(), width, tails, &a.q[first * k],
                   k);
    CausalConvSilu(&a.proj[first * p + k], p, n, k, w_->k_conv.data(), width, tails + tail_rows * k,
                   &a.k[first * k], k);
  }
  L2NormalizeGroups(a.q.data(), batch.rows * spec_.heads, static_cast<int>(spec_.head_dim),
                    kL2NormEps);
  L2NormalizeGroups(a.k.data(), batch.rows * spec_.heads, static_cast<int>(spec_.head_dim),
                    kL2NormEps);
}

// Per (sequence, head): the decayed rank-1 updates of Hs and Gs, the CG solve and the readout,
// token after token.
void MesaMixer::Recurrence(const MixerBatch& batch, Activations& a) const {
  const int64_t h = spec_.heads, d = spec_.head_dim, k = h * d, p = a.p;
  const int64_t v_column = 2 * k, a_column = p - 2 * h, b_column = p - h;
  a.out.resize(batch.rows * k);

  ForEachSequenceHead(batch, h, [&](int64_t ci, int64_t head, SolverStats& stats) {
    const CpuSequence& seq = batch.sequences[ci];
    const CgStart start = seq.phase == SolvePhase::kDecode ? CgStart::kJacobi : CgStart::kZero;
    float* hs = seq.state + state_offset_ + head * d * d;
    float* gs = hs + h * d * d;
    std::vector<float> scratch(4 * d);
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = batch.first_row[ci] + t;
      const MesaHeadInputs in{
          .q = &a.q[r * k + head * d],
          .k = &a.k[r * k + head * d],
          .v = &a.proj[r * p + v_column + head * d],
          .lambda = w_->lambda.data() + head * d,
          .gamma = Sigmoid(a.proj[r * p + a_column + head] + w_->a_bias[head]),
          .beta = Sigmoid(a.proj[r * p + b_column + head] + w_->b_bias[head]),
      };
      stats.Add(MesaHeadStep(in, static_cast<int>(d), seq.solver, start, hs, gs,
                             &a.out[r * k + head * d], scratch.data()));
    }
  });
}

}  // namespace ridge
