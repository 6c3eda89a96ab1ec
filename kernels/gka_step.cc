#include "kernels/gka_step.h"

#include <cmath>

#include "base/multiversion.h"
#include "kernels/chebyshev_solver.h"

namespace ridge {
namespace {

// Below this ||Hs||_F (keys all but zero for long enough that Hs decayed into denormals), the
// Chebyshev step 2 / ((1 + 2a) F) would overflow to inf: such a head answers as Hs = 0 does.
constexpr float kSmallestFrobenius = 1e-30f;

}  // namespace

// Built for AVX2 as well as baseline x86-64; the loader picks the clone the CPU supports.
RIDGE_AVX2_CLONES std::optional<SolveResult> GkaHeadStep(const GkaHeadInputs& in, int d,
                                                         const SolverOptions& options, float* hs,
                                                         float* ss, float* out, float* scratch) {
  float* key = scratch;              // k~ = beta k
  float* value = scratch + d;        // v~ = beta v
  float* readout = scratch + 2 * d;  // q~
  const float decay = std::exp(in.log_decay);
  for (int i = 0; i < d; ++i) {
    key[i] = in.beta * in.k[i];
    value[i] = in.beta * in.v[i];
  }
  double frobenius2 = 0.0;
  for (int i = 0; i < d; ++i) {
    float* h_row = hs + static_cast<long>(i) * d;
    float* s_row = ss + static_cast<long>(i) * d;
    // Squares in double (still vectorised, 4 wide): in float, entries below 1e-19 would square to
    // zero and a small Hs would read as zero.
    double row2 = 0.0;
    for (int j = 0; j < d; ++j) {
      h_row[j] = decay * h_row[j] + key[i] * key[j];
      s_row[j] = decay * s_row[j] + key[i] * value[j];
    }
    double part[8] = {};
    int j = 0;
    for (; j + 8 <= d; j += 8) {
      for (int lane = 0; lane < 8; ++lane) {
        part[lane] += double(h_row[j + lane]) * h_row[j + lane];
      }
    }
    for (; j < d; ++j) row2 += double(h_row[j]) * h_row[j];
    row2 +=
        ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    frobenius2 += row2;
  }
  std::optional<SolveResult> result;
  const float frobenius = static_cast<float>(std::sqrt(frobenius2));
  if (!in.solve) {
    for (int i = 0; i < d; ++i) readout[i] = in.q[i];
  } else if (frobenius > kSmallestFrobenius) {
    // scratch[0, 2d) is free again once Hs and Ss are updated.
    result = ChebyshevSolve(hs, d, in.ridge_strength, frobenius, in.q, options, readout, scratch);
    for (int i = 0; i < d; ++i) readout[i] = in.q[i] + in.alpha * (readout[i] - in.q[i]);
  } else {
    // Hs = 0 (every key so far was zero, or next to it): x = 0 is the only bounded answer.
    result = SolveResult{};
    for (int i = 0; i < d; ++i) readout[i] = (1.0f - in.alpha) * in.q[i];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int j = 0; j < d; ++j) out[j] = 0.0f;
  for (int i = 0; i < d; ++i) {
    const float* s_row = ss + static_cast<long>(i) * d;
    const float weight = scale * readout[i];
    for (int j = 0; j < d; ++j) out[j] += weight * s_row[j];
  }
  return result;
}

}  // namespace ridge
