#include "models/cpu/mesa_mixer.h"

#include <algorithm>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/mesa_step.h"
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

// Causal depthwise convolution over the raw q/k projections, continuing each sequence from the
// tail of raw values kept in its state, then SiLU and the per-head L2 norm.
void MesaMixer::ShortConvolution(const MixerBatch& batch, Activations& a) const {
  const int64_t k = spec_.heads * spec_.head_dim, width = spec_.conv_size, tail_rows = width - 1;
  const int64_t p = a.p, matrices = 2 * spec_.heads * spec_.head_dim * spec_.head_dim;
  a.q.resize(batch.rows * k);
  a.k.resize(batch.rows * k);

  for (size_t ci = 0; ci < batch.sequences.size(); ++ci) {
    const int64_t first = batch.first_row[ci];
    const int64_t n = static_cast<int64_t>(batch.sequences[ci].tokens.size());
    float* tails = batch.sequences[ci].state + state_offset_ + matrices;
    for (int which = 0; which < 2; ++which) {
      const float* weight = which == 0 ? w_->q_conv.data() : w_->k_conv.data();
      float* tail = tails + which * tail_rows * k;
      float* out = which == 0 ? a.q.data() : a.k.data();
      const int64_t column = which * k;  // q columns first, then k
      // Raw value of channel ch at chunk position s (s < 0 reaches into the tail).
      auto raw = [&](int64_t s, int64_t ch) {
        return s >= 0 ? a.proj[(first + s) * p + column + ch] : tail[(tail_rows + s) * k + ch];
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
  L2NormalizeGroups(a.q.data(), batch.rows * spec_.heads, static_cast<int>(spec_.head_dim),
                    kL2NormEps);
  L2NormalizeGroups(a.k.data(), batch.rows * spec_.heads, static_cast<int>(spec_.head_dim),
                    kL2NormEps);
}

// Per (sequence, head): the decayed rank-1 updates of Hs and Gs, the CG solve and the readout,
// token after token. Pairs are independent, so they run in parallel.
void MesaMixer::Recurrence(const MixerBatch& batch, Activations& a) const {
  const int64_t h = spec_.heads, d = spec_.head_dim, k = h * d, p = a.p;
  const int64_t v_column = 2 * k, a_column = p - 2 * h, b_column = p - h;
  a.out.resize(batch.rows * k);

  const int64_t pairs = static_cast<int64_t>(batch.sequences.size()) * h;
  std::vector<SolverStats> pair_stats(pairs);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t ci = pair / h, head = pair % h;
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
      pair_stats[pair].Add(MesaHeadStep(in, static_cast<int>(d), seq.solver, start, hs, gs,
                                        &a.out[r * k + head * d], scratch.data()));
    }
  }
  for (int64_t pair = 0; pair < pairs; ++pair) {
    SolverStats* stats = batch.sequences[pair / h].stats;
    if (stats != nullptr) stats->Merge(pair_stats[pair]);
  }
}

}  // namespace ridge
