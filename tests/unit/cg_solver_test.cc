#include "kernels/cg_solver.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ridge {
namespace {

// A MesaNet-like system: Hs = sum of decayed rank-1 terms of unit vectors, lambda >= 0.25.
struct System {
  int d;
  std::vector<float> hs, lambda, b;
};

System RandomSystem(int d, int rank_ones, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0.25f, 1.5f);
  System s{d, std::vector<float>(d * d, 0.0f), std::vector<float>(d), std::vector<float>(d)};
  for (int r = 0; r < rank_ones; ++r) {
    std::vector<float> k(d);
    float norm = 0;
    for (float& x : k) norm += (x = normal(rng)) * x;
    for (float& x : k) x /= std::sqrt(norm);
    for (int i = 0; i < d * d; ++i) s.hs[i] *= 0.97f;
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) s.hs[i * d + j] += k[i] * k[j];
  }
  for (float& x : s.lambda) x = uniform(rng);
  float norm = 0;
  for (float& x : s.b) norm += (x = normal(rng)) * x;
  for (float& x : s.b) x /= std::sqrt(norm);
  return s;
}

// Direct solve in double precision through a Cholesky factorisation.
std::vector<double> CholeskySolve(const System& s) {
  const int d = s.d;
  std::vector<double> a(d * d), l(d * d, 0.0), y(d), x(d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) a[i * d + j] = s.hs[i * d + j] + (i == j ? s.lambda[i] : 0.0);
  for (int j = 0; j < d; ++j) {
    double diag = a[j * d + j];
    for (int k = 0; k < j; ++k) diag -= l[j * d + k] * l[j * d + k];
    l[j * d + j] = std::sqrt(diag);
    for (int i = j + 1; i < d; ++i) {
      double v = a[i * d + j];
      for (int k = 0; k < j; ++k) v -= l[i * d + k] * l[j * d + k];
      l[i * d + j] = v / l[j * d + j];
    }
  }
  for (int i = 0; i < d; ++i) {
    double v = s.b[i];
    for (int k = 0; k < i; ++k) v -= l[i * d + k] * y[k];
    y[i] = v / l[i * d + i];
  }
  for (int i = d - 1; i >= 0; --i) {
    double v = y[i];
    for (int k = i + 1; k < d; ++k) v -= l[k * d + i] * x[k];
    x[i] = v / l[i * d + i];
  }
  return x;
}

SolveResult Solve(const System& s, SolverOptions options, CgStart start, std::vector<float>* x) {
  x->assign(s.d, 0.0f);
  std::vector<float> scratch(3 * s.d);
  return ConjugateGradientSolve(s.hs.data(), s.lambda.data(), s.b.data(), s.d, options, start,
                                x->data(), scratch.data());
}

double RelativeError(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(ConjugateGradientTest, MatchesCholeskyOnRandomSpdSystems) {
  for (int d : {16, 64, 128}) {
    for (uint64_t seed = 0; seed < 5; ++seed) {
      const System s = RandomSystem(d, 3 * d, seed);
      const std::vector<double> ref = CholeskySolve(s);
      for (CgStart start : {CgStart::kZero, CgStart::kJacobi}) {
        std::vector<float> x;
        const SolveResult r = Solve(s, {1e-6f, 200}, start, &x);
        EXPECT_LT(RelativeError(x, ref), 1e-4) << "d=" << d << " seed=" << seed;
        EXPECT_LE(r.relative_residual, 1e-6f);
        EXPECT_FALSE(r.capped);
      }
    }
  }
}

TEST(ConjugateGradientTest, ToleranceZeroRunsExactlyMaxIterations) {
  const System s = RandomSystem(64, 100, 7);
  for (int cap : {1, 5, 30}) {
    std::vector<float> x;
    const SolveResult r = Solve(s, {0.0f, cap}, CgStart::kZero, &x);
    EXPECT_EQ(r.iterations, cap);
    EXPECT_TRUE(r.capped);
  }
}

TEST(ConjugateGradientTest, LooserToleranceStopsEarlierAndMeetsIt) {
  const System s = RandomSystem(128, 400, 11);
  int previous = 1 << 30;
  for (float tol : {1e-6f, 1e-4f, 1e-3f, 1e-2f, 1e-1f}) {
    std::vector<float> x;
    const SolveResult r = Solve(s, {tol, 500}, CgStart::kZero, &x);
    EXPECT_LE(r.iterations, previous) << tol;
    EXPECT_LE(r.relative_residual, tol);
    EXPECT_FALSE(r.capped);
    previous = r.iterations;
  }
  EXPECT_LT(previous, 30);
}

TEST(ConjugateGradientTest, CappedWhenBudgetTooSmall) {
  const System s = RandomSystem(128, 400, 3);
  std::vector<float> x;
  const SolveResult r = Solve(s, {1e-8f, 2}, CgStart::kZero, &x);
  EXPECT_EQ(r.iterations, 2);
  EXPECT_TRUE(r.capped);
  EXPECT_GT(r.relative_residual, 1e-8f);
}

TEST(ConjugateGradientTest, JacobiStartFromDiagonalSystemIsExact) {
  System s = RandomSystem(32, 0, 5);  // Hs = 0: A is diagonal, the Jacobi guess is the answer
  std::vector<float> x;
  // The tolerance is relative to the (rounding-level) initial residual, so a few steps remain.
  const SolveResult r = Solve(s, {1e-3f, 30}, CgStart::kJacobi, &x);
  EXPECT_LE(r.iterations, 5);
  const std::vector<double> ref = CholeskySolve(s);
  EXPECT_LT(RelativeError(x, ref), 1e-4);
}

TEST(ConjugateGradientTest, ZeroRightHandSide) {
  System s = RandomSystem(16, 10, 1);
  std::fill(s.b.begin(), s.b.end(), 0.0f);
  std::vector<float> x;
  const SolveResult r = Solve(s, {0.0f, 30}, CgStart::kZero, &x);
  EXPECT_EQ(r.iterations, 0);
  for (float v : x) EXPECT_EQ(v, 0.0f);
}

TEST(SolverOptionsTest, Validation) {
  EXPECT_TRUE(ValidateSolverOptions({1e-4f, 30}, 100).ok());
  EXPECT_FALSE(ValidateSolverOptions({-1.0f, 30}, 100).ok());
  EXPECT_FALSE(ValidateSolverOptions({NAN, 30}, 100).ok());
  EXPECT_FALSE(ValidateSolverOptions({2.0f, 30}, 100).ok());
  EXPECT_FALSE(ValidateSolverOptions({0.0f, 0}, 100).ok());
  EXPECT_FALSE(ValidateSolverOptions({0.0f, 101}, 100).ok());
}

}  // namespace
}  // namespace ridge
