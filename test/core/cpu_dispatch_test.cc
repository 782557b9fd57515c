// Runtime CPU dispatch (cpu_dispatch.h): every kernel level this machine runs
// is forced in turn, and its products, softmax, Bernoulli and tanh passes and a whole
// attention energy agree with references computed here in long double (and
// with the generic level) to round-off, and so do the Energy Transformer's
// value, gradient and Hessian-vector product; the special softmax columns
// (all masked, +inf, NaN) and the Bernoulli limits keep their rules at every
// level, and so do the solvers' low-rank products; levels are named, parsed
// and refused as documented.
#define BOOST_TEST_MODULE cpu_dispatch
#include <boost/test/unit_test.hpp>

#include <implicit/core/activations.h>
#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/gemm.h>
#include <implicit/layers/energy_transformer_energy.h>
#include <implicit/layers/log_sum_exp.h>
#include <implicit/layers/modern_hopfield_energy.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using implicit::CpuLevel;
using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

namespace {

// Restores the level that was active when the test started.
struct LevelGuard {
  CpuLevel saved = implicit::ActiveCpuLevel();
  ~LevelGuard() { implicit::SetCpuLevel(saved); }
};

template <typename S>
Matrix<S> Random(Index rows, Index cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal;
  Matrix<S> m(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) m(i, j) = static_cast<S>(normal(gen));
  return m;
}

template <typename S>
double Tolerance() {
  return std::is_same_v<S, float> ? 2e-5 : 1e-13;
}

// max |a - b| / (1 + max |b|)
template <typename A, typename B>
double RelativeError(const A& a, const B& b) {
  double worst = 0, scale = 1;
  for (Index j = 0; j < b.cols(); ++j)
    for (Index i = 0; i < b.rows(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(a(i, j)) - static_cast<double>(b(i, j))));
      scale = std::max(scale, 1 + std::abs(static_cast<double>(b(i, j))));
    }
  return worst / scale;
}

// c = beta c + alpha op(a) op(b) of every orientation, on strided operands
// (blocks of larger matrices), against a long double triple loop.
template <typename S>
void CheckGemm() {
  const Index m = 37, n = 29, k = 70;  // not multiples of any vector width
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Matrix<S> a_store = Random<S>(ta ? k + 3 : m + 3, ta ? m : k, 1);
      const Matrix<S> b_store = Random<S>(tb ? n + 2 : k + 2, tb ? k : n, 2);
      const auto a = a_store.topRows(ta ? k : m);
      const auto b = b_store.topRows(tb ? n : k);
      Matrix<S> c_store = Random<S>(m + 4, n, 3);
      const Matrix<S> c0 = c_store.topRows(m);
      const S alpha = S(0.75), beta = S(-0.5);
      Matrix<long double> expected(m, n);
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
          long double sum = 0;
          for (Index l = 0; l < k; ++l) {
            const long double x = ta ? a(l, i) : a(i, l), y = tb ? b(j, l) : b(l, j);
            sum += x * y;
          }
          expected(i, j) = alpha * sum + beta * static_cast<long double>(c0(i, j));
        }
      implicit::internal::Gemm<S>(alpha, {a.data(), a.rows(), a.cols(), a_store.rows(), ta},
                                  {b.data(), b.rows(), b.cols(), b_store.rows(), tb}, beta, c_store.data(),
                                  c_store.rows());
      BOOST_TEST(RelativeError(c_store.topRows(m), expected) < Tolerance<S>() * k,
                 "ta " << ta << " tb " << tb);
      const Matrix<S> untouched = Random<S>(m + 4, n, 3).bottomRows(4);
      BOOST_TEST((c_store.bottomRows(4).array() == untouched.array()).all(), "rows outside c were written");
    }
  }
  // beta = 0 overwrites whatever c held, NaN included.
  const Matrix<S> a = Random<S>(5, 4, 4), b = Random<S>(4, 3, 5);
  Matrix<S> c = Matrix<S>::Constant(5, 3, std::numeric_limits<S>::quiet_NaN());
  implicit::GemmInto<S>(c, a, false, b);
  BOOST_TEST(RelativeError(c, (a * b).eval()) < Tolerance<S>() * 4);
  Matrix<S> bad(4, 3);
  BOOST_CHECK_THROW(implicit::GemmInto<S>(bad, a, false, b), std::invalid_argument);
  // Both operands transposed, as row blocks of larger matrices (stacked heads).
  const Matrix<S> stacked_a = Random<S>(9, 5, 6), stacked_b = Random<S>(7, 4, 7);
  Matrix<S> d = Random<S>(5, 3, 8);
  const Matrix<S> d0 = d;
  implicit::internal::GemmOpInto<S>(d, stacked_a.middleRows(2, 4), true, stacked_b.middleRows(1, 3), true,
                                    S(2), S(-1));
  const Matrix<S> expected = S(2) * stacked_a.middleRows(2, 4).transpose() *
                                 stacked_b.middleRows(1, 3).transpose() - d0;
  BOOST_TEST(RelativeError(d, expected) < Tolerance<S>() * 4);
  BOOST_CHECK_THROW(implicit::internal::GemmOpInto<S>(bad, a, false, b, true), std::invalid_argument);
}

// softmax(beta a + mask) and lse of each column, in long double.
template <typename S>
void ReferenceSoftmax(const Matrix<S>& a, S beta, const Matrix<S>& mask, Matrix<S>* p, Vector<S>* lse) {
  p->resize(a.rows(), a.cols());
  lse->resize(a.cols());
  for (Index j = 0; j < a.cols(); ++j) {
    long double m = -INFINITY;
    std::vector<long double> s(a.rows());
    for (Index i = 0; i < a.rows(); ++i) {
      s[i] = static_cast<long double>(beta) * a(i, j) + (mask.size() ? mask(i, mask.cols() == 1 ? 0 : j) : S(0));
      m = std::max(m, s[i]);
    }
    long double sum = 0;
    for (Index i = 0; i < a.rows(); ++i) sum += std::exp(s[i] - m);
    for (Index i = 0; i < a.rows(); ++i) (*p)(i, j) = static_cast<S>(std::exp(s[i] - m) / sum);
    (*lse)(j) = static_cast<S>(m + std::log(sum));
  }
}

template <typename S>
void CheckSoftmax() {
  const Index N = 301, B = 37;
  const S beta = S(3);
  const S inf = std::numeric_limits<S>::infinity();
  const Matrix<S> a = Random<S>(N, B, 7);
  Matrix<S> shared_mask = Matrix<S>::Zero(N, 1), per_sample = Random<S>(N, B, 8);
  for (Index i = 0; i < N; i += 5) shared_mask(i, 0) = -inf;
  for (const Matrix<S>& mask : {Matrix<S>(), shared_mask, per_sample}) {
    Matrix<S> expected_p;
    Vector<S> expected_lse;
    ReferenceSoftmax<S>(a, beta, mask, &expected_p, &expected_lse);
    Matrix<S> p = a;
    Vector<S> lse(B);
    implicit::internal::ScaledColumnSoftmaxInPlace<S>(p, beta, mask, lse.data(), "test");
    BOOST_TEST(RelativeError(p, expected_p) < Tolerance<S>() * 10);
    BOOST_TEST(RelativeError(lse, expected_lse) < Tolerance<S>() * 10);
    for (Index i = 0; i < N && mask.cols() == 1 && mask.size(); i += 5) BOOST_TEST(p(i, 0) == S(0));
    // lse alone: a holds beta a + mask afterwards.
    Matrix<S> scaled = a;
    Vector<S> lse_only(B);
    implicit::internal::ScaledColumnSoftmaxInPlace<S>(scaled, beta, mask, lse_only.data(), "test", false);
    BOOST_TEST(RelativeError(lse_only, expected_lse) < Tolerance<S>() * 10);
    Matrix<S> expected_scaled = beta * a;
    if (mask.size()) {
      for (Index j = 0; j < B; ++j) expected_scaled.col(j) += mask.col(mask.cols() == 1 ? 0 : j);
    }
    // (to round-off: with FMA, beta a + mask is rounded once)
    const auto finite = expected_scaled.array().isFinite();
    BOOST_TEST(RelativeError(finite.select(scaled, S(0)).eval(), finite.select(expected_scaled, S(0)).eval()) <
               Tolerance<S>());
    BOOST_TEST(((scaled.array() == -inf) == (expected_scaled.array() == -inf)).all());
  }
  // Special columns: all masked, two +inf scores, a NaN; the others normal;
  // twice, among normal columns before and after them.
  Matrix<S> s = Random<S>(N, 20, 9);
  for (const Index c : {Index(0), Index(17)}) {
    s.col(c).setConstant(-inf);
    s(3, c + 1) = inf;
    s(40, c + 1) = inf;
    s(7, c + 2) = std::numeric_limits<S>::quiet_NaN();
  }
  Vector<S> lse(20);
  Matrix<S> p = s;
  implicit::internal::ScaledColumnSoftmaxInPlace<S>(p, S(1), Matrix<S>(), lse.data(), "test");
  for (const Index c : {Index(0), Index(17)}) {
    BOOST_TEST(p.col(c).isZero());
    BOOST_TEST(lse(c) == -inf);
    BOOST_TEST(p(3, c + 1) == S(0.5));
    BOOST_TEST(p(40, c + 1) == S(0.5));
    BOOST_TEST(p.col(c + 1).sum() == S(1));
    BOOST_TEST(lse(c + 1) == inf);
    BOOST_TEST(p.col(c + 2).hasNaN());
    BOOST_TEST(std::isnan(lse(c + 2)));
  }
  for (const Index c : {Index(3), Index(16)}) {
    BOOST_TEST(std::abs(p.col(c).sum() - S(1)) < 10 * Tolerance<S>());
    BOOST_TEST(std::isfinite(lse(c)));
  }
}

// The softmax's exponentials at the active level, entry by entry against long
// double: a column holding 0 (its maximum) and scores down to 40 below the log
// of the smallest normal number, densely near 0, over the whole range and at
// the reduction's breakpoints (k log 2 +- log(2) / 2), with beta = 1 and no
// mask (the scores are not rounded before the exponential). Each weight is
// within 4 ulps of e^(x - lse) (the kernel's e^x about two, the division's
// rounding one); below the smallest normal number a weight is 0 or at most it
// (the vector path flushes what std::exp would make subnormal).
template <typename S>
void CheckSoftmaxExponentials() {
  const long double lowest = std::log(static_cast<long double>(std::numeric_limits<S>::min()));
  const long double ln2 = std::log(2.0L);
  std::vector<S> scores = {S(0), S(-0.0), -std::numeric_limits<S>::denorm_min(), S(-1e-30), S(-1e-6)};
  for (int i = 1; i <= 2000; ++i) scores.push_back(static_cast<S>((lowest - 40) * i / 2000));
  for (int i = 1; i <= 200; ++i) scores.push_back(static_cast<S>(-2.0L * i / 200));
  for (int k = 0; k > static_cast<int>(lowest / ln2) - 2; k -= 7) {
    for (long double d : {-0.5L, 0.5L}) {
      const long double at = (k + d) * ln2;
      if (at > 0) continue;
      scores.push_back(static_cast<S>(at));
      scores.push_back(std::nextafter(static_cast<S>(at), S(0)));
    }
  }
  scores.push_back(static_cast<S>(lowest));
  scores.push_back(std::nextafter(static_cast<S>(lowest), S(0)));
  Matrix<S> column = Eigen::Map<const Vector<S>>(scores.data(), static_cast<Index>(scores.size()));
  long double sum = 0;
  for (S x : scores) sum += std::exp(static_cast<long double>(x));
  Vector<S> lse(1);
  implicit::internal::ScaledColumnSoftmaxInPlace<S>(column, S(1), Matrix<S>(), lse.data(), "test");
  const long double eps = std::numeric_limits<S>::epsilon(), tiny = std::numeric_limits<S>::min();
  int wrong = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const long double reference = std::exp(static_cast<long double>(scores[i])) / sum;
    const long double p = column(static_cast<Index>(i), 0);
    const bool ok = reference < tiny ? (p >= 0 && p <= tiny) : std::abs(p - reference) <= 4 * eps * reference;
    if (!ok && ++wrong <= 5) {
      BOOST_TEST(ok, "weight of " << scores[i] << ": " << static_cast<double>(p) << " against "
                                  << static_cast<double>(reference));
    }
  }
  BOOST_TEST(wrong == 0, wrong << " weights off");
  BOOST_TEST(std::abs(lse(0) - std::log(sum)) <= 4 * eps);
}

// The modern Hopfield energy's CCCP update, gradient and HVP at this level
// against the generic level's.
template <typename S>
void CheckHopfieldAgainstGeneric(CpuLevel level) {
  typename implicit::ModernHopfieldEnergy<S>::Options o;
  o.beta = 2.0;
  implicit::ModernHopfieldEnergy<S> energy(Random<S>(64, 300, 11), o);
  const Matrix<S> xi = Random<S>(64, 50, 12) * S(0.3), v = Random<S>(64, 50, 13);
  auto evaluate = [&](Matrix<S>* update, Matrix<S>* grad, Matrix<S>* hvp, Vector<S>* value) {
    update->resize(64, 50);
    grad->resize(64, 50);
    hvp->resize(64, 50);
    value->resize(50);
    energy.CccpUpdateAndValue(xi, *update, *value);
    energy.Gradient(xi, *grad);
    energy.HessianVectorProduct(xi, v, *hvp);
  };
  implicit::SetCpuLevel(CpuLevel::kGeneric);
  Matrix<S> u0, g0, h0;
  Vector<S> e0;
  evaluate(&u0, &g0, &h0, &e0);
  implicit::SetCpuLevel(level);
  Matrix<S> u, g, h;
  Vector<S> e;
  evaluate(&u, &g, &h, &e);
  const double tol = Tolerance<S>() * 1000;
  BOOST_TEST(RelativeError(u, u0) < tol);
  BOOST_TEST(RelativeError(g, g0) < tol);
  BOOST_TEST(RelativeError(h, h0) < tol);
  BOOST_TEST(RelativeError(e, e0) < tol);
  BOOST_TEST(RelativeError((xi - g).eval(), u) < tol);  // the update is xi - grad E
}

// The Energy Transformer (its per-head products and softmaxes run the
// kernels) at the active level against the generic level: energy values,
// gradient and Hessian-vector product, with a softmax memory and masked
// self-attention.
template <typename S>
void CheckEnergyTransformerAgainstGeneric(CpuLevel level) {
  typename implicit::EnergyTransformer<S>::Options o;
  o.num_tokens = 9;
  o.token_dim = 6;
  o.num_heads = 2;
  o.head_dim = 5;
  o.num_memories = 7;
  o.memory = implicit::EnergyTransformerMemory::kSoftmax;
  o.exclude_self = true;
  implicit::EnergyTransformer<S> energy(o);
  energy.Initialize(3, 0.7);
  const Matrix<S> x = Random<S>(54, 4, 14), v = Random<S>(54, 4, 15);
  auto evaluate = [&](Matrix<S>* grad, Matrix<S>* hvp, Vector<S>* value) {
    grad->resize(54, 4);
    hvp->resize(54, 4);
    value->resize(4);
    energy.GradientAndValue(x, *grad, *value);
    energy.HessianVectorProduct(x, v, *hvp);
  };
  implicit::SetCpuLevel(CpuLevel::kGeneric);
  Matrix<S> g0, h0;
  Vector<S> e0;
  evaluate(&g0, &h0, &e0);
  implicit::SetCpuLevel(level);
  Matrix<S> g, h;
  Vector<S> e;
  evaluate(&g, &h, &e);
  const double tol = Tolerance<S>() * 1000;
  BOOST_TEST(RelativeError(g, g0) < tol);
  BOOST_TEST(RelativeError(h, h0) < tol);
  BOOST_TEST(RelativeError(e, e0) < tol);
  BOOST_TEST(g.allFinite());
}

// The Bernoulli prior's pass at the active level against long double
// references, entry by entry: K(t) = log(1 - p + p e^t), relative, with
// arguments near 0 (where K ~ p t: expm1 and log1p must keep their relative
// accuracy), K' = sigmoid(t + logit p) and K'' = K'(1 - K') relative or below
// the smallest normal number (the clamped exp's limits); over columns of an odd
// length (vector and scalar entries) and a sub-block, arguments from -800 to
// 800, across t = 30 (where the pass changes form), p from 1e-3 to 0.999, and
// NaN (NaN there only), -inf, +inf. Each output alone gives the same numbers.
template <typename S>
void CheckBernoulli() {
  const Index M = 37, B = 6, stride = 41;
  Matrix<S> t = Random<S>(stride, B, 31) * S(4);
  const S small[] = {S(-0.7), S(-0.5), S(-0.49), S(-1e-3), S(-1e-6), S(-1e-30), S(0), S(1e-30), S(1e-6), S(0.3)};
  for (Index i = 0; i < 10; ++i) t(i, 1) = small[i];
  for (Index i = 0; i < 10; ++i) t(i + 10, 1) = small[i] * S(0.37);
  const S special[] = {S(-800), S(800), S(40), S(-40), -std::numeric_limits<S>::infinity(),
                       std::numeric_limits<S>::infinity(), std::numeric_limits<S>::quiet_NaN(), S(29.9), S(30.1),
                       S(31)};
  for (Index i = 0; i < 10; ++i) t(i, 0) = special[i];
  Vector<S> p(M);
  for (Index i = 0; i < M; ++i) p(i) = S(1e-3) + (S(0.998) * S(i)) / S(M - 1);
  Matrix<S> k(stride, B), s(M, B), s2(stride, B);
  implicit::internal::BernoulliColumnsKernel<S>(t.data(), M, B, stride, p.data(), k.data(), stride, s.data(), M,
                                                s2.data(), stride);
  const long double tiny = std::numeric_limits<S>::min();
  for (Index j = 0; j < B; ++j) {
    for (Index i = 0; i < M; ++i) {
      const long double x = t(i, j), pl = p(i);
      if (std::isnan(t(i, j))) {
        BOOST_TEST((std::isnan(k(i, j)) && std::isnan(s(i, j)) && std::isnan(s2(i, j))), "NaN at " << i << ", " << j);
        continue;
      }
      const long double reference = x > 30 ? x + std::log(pl + (1 - pl) * std::exp(-x)) : std::log1p(pl * std::expm1(x));
      if (std::isinf(static_cast<double>(reference))) {
        BOOST_TEST(k(i, j) == static_cast<S>(reference), "K at " << i << ", " << j);
      } else {
        BOOST_TEST(std::abs(k(i, j) - reference) <= 8 * Tolerance<S>() * std::abs(reference) +
                                                       std::numeric_limits<S>::denorm_min(),
                   "K(" << t(i, j) << ") with p = " << p(i) << ": " << k(i, j) << " against "
                        << static_cast<double>(reference));
      }
      const long double z = x + std::log(pl / (1 - pl));
      const long double sigmoid = std::isinf(static_cast<double>(x)) ? (x > 0 ? 1.0L : 0.0L) : 1.0L / (1.0L + std::exp(-z));
      const long double sigmoid2 = std::isinf(static_cast<double>(x)) ? 0.0L : sigmoid / (1.0L + std::exp(z));
      BOOST_TEST(std::abs(s(i, j) - sigmoid) <= 10 * Tolerance<S>() * sigmoid + tiny, "K' at " << i << ", " << j);
      BOOST_TEST(std::abs(s2(i, j) - sigmoid2) <= 10 * Tolerance<S>() * sigmoid2 + tiny, "K'' at " << i << ", " << j);
      BOOST_TEST((s(i, j) >= S(0) && s(i, j) <= S(1) && s2(i, j) >= S(0)));
    }
  }
  // One output alone (the others nullptr) gives the same numbers.
  Matrix<S> k_alone(stride, B), s_alone(M, B), s2_alone(stride, B);
  implicit::internal::BernoulliColumnsKernel<S>(t.data(), M, B, stride, p.data(), k_alone.data(), stride, nullptr, 0,
                                                nullptr, 0);
  implicit::internal::BernoulliColumnsKernel<S>(t.data(), M, B, stride, p.data(), nullptr, 0, s_alone.data(), M,
                                                nullptr, 0);
  implicit::internal::BernoulliColumnsKernel<S>(t.data(), M, B, stride, p.data(), nullptr, 0, nullptr, 0,
                                                s2_alone.data(), stride);
  const auto same = [&](const Matrix<S>& a, const Matrix<S>& b) {
    return ((a.topRows(M).array() == b.topRows(M).array()) || b.topRows(M).array().isNaN()).all();
  };
  BOOST_TEST(same(k_alone, k));
  BOOST_TEST(same(s_alone, s));
  BOOST_TEST(same(s2_alone, s2));
}

// The Bernoulli pass's K and K' at the active level on a dense grid, to a few
// ulps of long double references (relative): t from -40 to 35 (across t = 30)
// and a column within 0.2 of 0 (where K ~ p t), p from 1e-3 to 0.999 — the
// pass's own exponential, expm1 and log (CheckBernoulli's tolerance, kept
// loose for its limits, would not see a polynomial's term gone).
template <typename S>
void CheckBernoulliUlps() {
  const Index M = 2001, B = 5;
  Matrix<S> t(M, B);
  Vector<S> p(M);
  for (Index i = 0; i < M; ++i) p(i) = S(1e-3) + S(0.998) * S(i) / S(M - 1);
  for (Index j = 0; j + 1 < B; ++j)
    for (Index i = 0; i < M; ++i) t(i, j) = S(-40) + S(75) * S((i * 7 + j * 501) % M) / S(M) + S(1e-3) * S(j);
  for (Index i = 0; i < M; ++i) t(i, B - 1) = S(i - M / 2) * S(2e-4);
  Matrix<S> k(M, B), s(M, B);
  implicit::internal::BernoulliColumnsKernel<S>(t.data(), M, B, M, p.data(), k.data(), M, s.data(), M, nullptr, 0);
  const long double eps = std::numeric_limits<S>::epsilon();
  long double worst_k = 0, worst_s = 0;
  for (Index j = 0; j < B; ++j) {
    for (Index i = 0; i < M; ++i) {
      const long double x = t(i, j), pl = p(i);
      const long double reference = x > 30 ? x + std::log(pl + (1 - pl) * std::exp(-x)) : std::log1p(pl * std::expm1(x));
      if (reference != 0) worst_k = std::max(worst_k, std::abs(k(i, j) - reference) / std::abs(reference) / eps);
      const long double sigmoid = 1.0L / (1.0L + std::exp(-(x + std::log(pl / (1 - pl)))));
      worst_s = std::max(worst_s, std::abs(s(i, j) - sigmoid) / sigmoid / eps);
    }
  }
  BOOST_TEST(static_cast<double>(worst_k) <= 4.0, "K within " << static_cast<double>(worst_k) << " ulps");
  BOOST_TEST(static_cast<double>(worst_s) <= 4.0, "K' within " << static_cast<double>(worst_s) << " ulps");
}

// The tanh pass at the active level against long double std::tanh, entry by
// entry and relative: columns of an odd length (vector and scalar entries) in
// a sub-block, arguments over the whole range and near 0 (where the series of
// expm1 takes over: |2x| < 1/2 and just past it), subnormals, +-0 (its sign
// kept), +-inf (+-1), +-800 and NaN (NaN there only).
template <typename S>
void CheckTanh() {
  const Index M = 37, B = 5, stride = 41;
  Matrix<S> x = Random<S>(stride, B, 51) * S(3);
  const S special[] = {S(0.2499), S(0.25), S(0.2501), S(-0.2499), S(1e-3), S(-1e-7), S(1e-30), S(-1e-30),
                       std::numeric_limits<S>::denorm_min(), S(19.9), S(20.1), S(-25), S(800), S(-800), S(0), S(-0.0),
                       std::numeric_limits<S>::infinity(), -std::numeric_limits<S>::infinity(),
                       std::numeric_limits<S>::quiet_NaN()};
  Index c = 0;
  for (S v : special) x(c % M, c / M) = v, ++c;
  x.col(3) *= S(0.1);  // a column of small arguments
  Matrix<S> y(M + 2, B);
  implicit::internal::TanhColumnsKernel<S>(x.data(), M, B, stride, y.data(), M + 2);
  const long double eps = std::numeric_limits<S>::epsilon();
  for (Index j = 0; j < B; ++j) {
    for (Index i = 0; i < M; ++i) {
      if (std::isnan(x(i, j))) {
        BOOST_TEST(std::isnan(y(i, j)), "NaN at " << i << ", " << j);
        continue;
      }
      const long double reference = std::tanh(static_cast<long double>(x(i, j)));
      BOOST_TEST(std::abs(y(i, j) - reference) <= 4 * eps * std::abs(reference),
                 "tanh(" << x(i, j) << ") = " << y(i, j) << " against " << static_cast<double>(reference));
      BOOST_TEST(std::signbit(y(i, j)) == std::signbit(x(i, j)), "the sign of tanh(" << x(i, j) << ")");
    }
  }
  // In place: the same numbers.
  Matrix<S> in_place = x;
  implicit::internal::TanhColumnsKernel<S>(in_place.data(), M, B, stride, in_place.data(), stride);
  BOOST_TEST((in_place.topRows(M).array() == y.topRows(M).array() || x.topRows(M).array().isNaN()).all());
}

// The solvers' low-rank products at the active level against long double
// sums: dots and combinations of k columns (a column stride above n) for
// lengths with and without a vector tail, k = 0 included (nothing is written
// or added), and the result does not depend on where the data lies (the same
// columns copied to an address one number further give the same bits).
template <typename S>
void CheckLowRank() {
  for (Index n : {0, 1, 3, 7, 8, 17, 64, 129}) {
    for (Index k : {0, 1, 5}) {
      BOOST_TEST_CONTEXT("n " << n << ", k " << k) {
        const Index stride = n + 3;
        const Matrix<S> a = Random<S>(stride, std::max<Index>(k, 1), 41 + n);
        const Vector<S> x = Random<S>(n, 1, 42 + n), coef = Random<S>(std::max<Index>(k, 1), 1, 43);
        const Vector<S> y0 = Random<S>(n, 1, 44 + n);
        Vector<S> dots = Vector<S>::Constant(k + 1, S(7));
        implicit::internal::ColumnDotsKernel<S>(a.data(), n, k, stride, x.data(), dots.data());
        Vector<S> y = y0;
        implicit::internal::AddColumnCombinationKernel<S>(a.data(), n, k, stride, coef.data(), y.data());
        BOOST_TEST(dots(k) == S(7), "nothing written past the k dots");
        double scale = 1;
        for (Index i = 0; i < n; ++i) scale += std::abs(static_cast<double>(x(i))) + std::abs(static_cast<double>(y0(i)));
        for (Index c = 0; c < k; ++c) {
          long double reference = 0;
          for (Index i = 0; i < n; ++i) reference += static_cast<long double>(a(i, c)) * x(i);
          BOOST_TEST(std::abs(dots(c) - reference) <= Tolerance<S>() * scale, "dot " << c);
        }
        for (Index i = 0; i < n; ++i) {
          long double reference = y0(i);
          for (Index c = 0; c < k; ++c) reference += static_cast<long double>(coef(c)) * a(i, c);
          BOOST_TEST(std::abs(y(i) - reference) <= Tolerance<S>() * scale, "combination row " << i);
        }
        // The same columns one number further in memory: the same bits.
        Vector<S> shifted(stride * std::max<Index>(k, 1) + 1), x_shifted(n + 1), y_shifted(n + 1);
        shifted.tail(stride * std::max<Index>(k, 1)) = Eigen::Map<const Vector<S>>(a.data(), a.size());
        x_shifted.tail(n) = x;
        y_shifted.tail(n) = y0;
        Vector<S> dots_shifted(k + 1);
        implicit::internal::ColumnDotsKernel<S>(shifted.data() + 1, n, k, stride, x_shifted.data() + 1,
                                                dots_shifted.data());
        implicit::internal::AddColumnCombinationKernel<S>(shifted.data() + 1, n, k, stride, coef.data(),
                                                          y_shifted.data() + 1);
        BOOST_TEST((dots_shifted.head(k).array() == dots.head(k).array()).all());
        BOOST_TEST((y_shifted.tail(n).array() == y.array()).all());
      }
    }
  }
}

// The solvers' per-sample combinations at the active level: out = sum_j c_j
// x_j for k = 1..4 terms against long double sums, lengths with and without a
// vector tail; in place (out one of the terms) the same numbers; every entry
// rounded alike wherever it lies (the same vectors one number further in
// memory, or as the head of longer ones, give the same bits); differences with
// coefficients +-1 rounded as Eigen rounds (a - b) - c.
template <typename S>
void CheckCombine() {
  for (Index n : {0, 1, 3, 7, 8, 17, 64, 129}) {
    for (int k = 1; k <= 4; ++k) {
      BOOST_TEST_CONTEXT("n " << n << ", k " << k) {
        const Matrix<S> x = Random<S>(n + 1, 4, 51 + n);
        const Vector<S> coef = Random<S>(4, 1, 52 + k);
        const S* terms[4] = {x.col(0).data(), x.col(1).data(), x.col(2).data(), x.col(3).data()};
        Vector<S> out = Vector<S>::Constant(n + 1, S(7));
        implicit::internal::CombineKernel<S>(n, k, terms, coef.data(), out.data());
        BOOST_TEST(out(n) == S(7), "nothing written past n");
        for (Index i = 0; i < n; ++i) {
          long double reference = 0, scale = 0;
          for (int j = 0; j < k; ++j) {
            reference += static_cast<long double>(coef(j)) * x(i, j);
            scale += std::abs(static_cast<long double>(coef(j)) * x(i, j));
          }
          BOOST_TEST(std::abs(out(i) - reference) <= Tolerance<S>() * (scale + 1), "row " << i);
        }
        // In place, into the last term.
        Matrix<S> y = x;
        const S* in_place[4] = {y.col(0).data(), y.col(1).data(), y.col(2).data(), y.col(3).data()};
        implicit::internal::CombineKernel<S>(n, k, in_place, coef.data(), y.col(k - 1).data());
        BOOST_TEST((y.col(k - 1).head(n).array() == out.head(n).array()).all());
        // One number further in memory, and as the head of vectors 9 longer.
        Matrix<S> shifted = Matrix<S>::Zero(n + 10, 4);
        shifted.block(1, 0, n, 4) = x.topRows(n);
        const S* moved[4] = {shifted.col(0).data() + 1, shifted.col(1).data() + 1, shifted.col(2).data() + 1,
                             shifted.col(3).data() + 1};
        Vector<S> out_moved(n + 10), out_long(n + 9);
        implicit::internal::CombineKernel<S>(n, k, moved, coef.data(), out_moved.data() + 1);
        implicit::internal::CombineKernel<S>(n + 9, k, moved, coef.data(), out_long.data());
        BOOST_TEST((out_moved.segment(1, n).array() == out.head(n).array()).all());
        BOOST_TEST((out_long.head(n).array() == out.head(n).array()).all());
      }
    }
    // (a - b) - c with coefficients 1, -1, -1: Eigen's rounding, to the bit.
    const Matrix<S> x = Random<S>(n, 3, 53 + n);
    const S* terms[3] = {x.col(0).data(), x.col(1).data(), x.col(2).data()};
    const S ones[3] = {S(1), S(-1), S(-1)};
    Vector<S> out(n);
    implicit::internal::CombineKernel<S>(n, 3, terms, ones, out.data());
    const Vector<S> eigen = (x.col(0) - x.col(1)) - x.col(2);
    BOOST_TEST((out.array() == eigen.array()).all(), "n " << n);
  }
  const S* none[1] = {nullptr};
  const S one[1] = {S(1)};
  BOOST_CHECK_THROW(implicit::internal::CombineKernel<S>(0, 0, none, one, nullptr), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::internal::CombineKernel<S>(0, 5, none, one, nullptr), std::invalid_argument);
}

// The clamp's passes at the active level, on views with a column stride: the
// merge and the combination exact (m is 0 or 1: the numbers of Eigen's
// expressions, to the bit), a NaN at a clamped coordinate kept (0 * NaN), the
// penalty against long double sums, the combination in place (out = x),
// without out (the penalty alone) and on the numbers moved in memory the same
// numbers, nothing written outside
// the views, and a large batch's columns shared among three threads the same
// bits as on one.
template <typename S>
void CheckClamp() {
  for (Index rows : {1, 7, 64, 129, 300}) {
    for (Index cols : {1, 5, 80}) {
      BOOST_TEST_CONTEXT("rows " << rows << ", cols " << cols) {
        const Index stride = rows + 3;
        const Matrix<S> mask = (Random<S>(rows, cols, 61 + rows).array() > S(0)).template cast<S>();
        const Matrix<S> c = Random<S>(rows, cols, 62 + cols);
        Matrix<S> x_store = Random<S>(stride, cols, 63 + rows);
        if (rows > 1) {
          x_store(0, 0) = std::numeric_limits<S>::quiet_NaN();  // clamped or free: kept either way
        }
        const Eigen::Map<const Matrix<S>, 0, Eigen::OuterStride<>> x(x_store.data(), rows, cols,
                                                                       Eigen::OuterStride<>(stride));
        const Matrix<S> merged = (mask.array() * x.array() + (S(1) - mask.array()) * c.array()).matrix();
        Matrix<S> out_store = Matrix<S>::Constant(stride, cols, S(7));
        implicit::internal::ClampMergeKernel<S>(rows, cols, mask.data(), rows, x.data(), stride, c.data(), rows,
                                                out_store.data(), stride);
        const Matrix<S> y = out_store.topRows(rows);
        BOOST_TEST(((y.array() == merged.array()) || (y.array().isNaN() && merged.array().isNaN())).all());
        if (rows > 1) BOOST_TEST(std::isnan(y(0, 0)));
        BOOST_TEST((out_store.bottomRows(3).array() == S(7)).all(), "nothing written between the columns");

        Matrix<S> base_store = Random<S>(stride, cols, 64 + cols);
        const Matrix<S> base = base_store.topRows(rows);
        const Matrix<S> combined =
            (mask.array() * base.array() + (S(1) - mask.array()) * (x - c).array()).matrix();
        Vector<S> penalty = Vector<S>::Constant(cols, S(2));
        implicit::internal::ClampCombineKernel<S>(rows, cols, mask.data(), rows, x.data(), stride, c.data(), rows,
                                                  base_store.data(), stride, penalty.data());
        const Matrix<S> out = base_store.topRows(rows);
        BOOST_TEST(((out.array() == combined.array()) || (out.array().isNaN() && combined.array().isNaN())).all());
        for (Index j = (rows > 1 ? 1 : 0); j < cols; ++j) {  // column 0 has the NaN
          long double reference = 2;
          for (Index i = 0; i < rows; ++i) {
            const long double r = (1.0L - mask(i, j)) * (static_cast<long double>(x(i, j)) - c(i, j));
            reference += 0.5L * r * r;
          }
          BOOST_TEST(std::abs(penalty(j) - reference) <= Tolerance<S>() * reference, "penalty " << j);
        }
        if (rows > 1) BOOST_TEST(std::isnan(penalty(0)), "a NaN state gives a NaN penalty (0 * NaN)");
        // The penalty alone, and the combination in place.
        Vector<S> alone = Vector<S>::Constant(cols, S(2));
        implicit::internal::ClampCombineKernel<S>(rows, cols, mask.data(), rows, x.data(), stride, c.data(), rows,
                                                  nullptr, 0, alone.data());
        BOOST_TEST(((alone.array() == penalty.array()) || (alone.array().isNaN() && penalty.array().isNaN())).all());
        // The same numbers elsewhere in memory (a copy without the stride, one
        // number further on): the same penalty, to the bit.
        Vector<S> moved_x(rows * cols + 1), moved_penalty = Vector<S>::Constant(cols, S(2));
        Eigen::Map<Matrix<S>>(moved_x.data() + 1, rows, cols) = x;
        implicit::internal::ClampCombineKernel<S>(rows, cols, mask.data(), rows, moved_x.data() + 1, rows, c.data(),
                                                  rows, nullptr, 0, moved_penalty.data());
        BOOST_TEST(((moved_penalty.array() == penalty.array()) ||
                    (moved_penalty.array().isNaN() && penalty.array().isNaN()))
                       .all());
        Matrix<S> in_place = x_store;
        implicit::internal::ClampCombineKernel<S>(rows, cols, mask.data(), rows, in_place.data(), stride, c.data(),
                                                  rows, in_place.data(), stride, nullptr);
        const Matrix<S> expected_in_place =
            (mask.array() * x.array() + (S(1) - mask.array()) * (x - c).array()).matrix();
        const Matrix<S> got_in_place = in_place.topRows(rows);
        BOOST_TEST(((got_in_place.array() == expected_in_place.array()) ||
                    (got_in_place.array().isNaN() && expected_in_place.array().isNaN()))
                       .all());
      }
    }
  }
  // A batch large enough to be shared among threads: the same bits on 1 and 3.
  const Index rows = 256, cols = 200;
  const Matrix<S> mask = (Random<S>(rows, cols, 71).array() > S(0)).template cast<S>();
  const Matrix<S> x = Random<S>(rows, cols, 72), c = Random<S>(rows, cols, 73);
  const int saved = Eigen::nbThreads();
  Matrix<S> outs[2];
  Vector<S> penalties[2];
  for (int t = 0; t < 2; ++t) {
    Eigen::setNbThreads(t == 0 ? 1 : 3);
    outs[t] = Random<S>(rows, cols, 74);
    penalties[t] = Vector<S>::Zero(cols);
    implicit::internal::ClampCombineKernel<S>(rows, cols, mask.data(), rows, x.data(), rows, c.data(), rows,
                                              outs[t].data(), rows, penalties[t].data());
  }
  Eigen::setNbThreads(saved);
  BOOST_TEST((outs[0].array() == outs[1].array()).all());
  BOOST_TEST((penalties[0].array() == penalties[1].array()).all());
}

// LayerNorm's pass at the active level against long double, on views with a
// column stride: yhat = (y - mean) / s, s = sqrt(var + eps); in place the same
// numbers; a constant column gives yhat 0 and s = sqrt(eps); a NaN stays in
// its column; nothing written between the columns.
template <typename S>
void CheckLayerNorm() {
  const S eps = S(1e-5);
  for (Index rows : {1, 3, 8, 16, 17, 100}) {
    const Index cols = 6, stride = rows + 2;
    BOOST_TEST_CONTEXT("rows " << rows) {
      Matrix<S> y_store = Random<S>(stride, cols, 81 + rows) * S(3);
      y_store.col(1).head(rows).setConstant(S(2.5));
      y_store(0, 2) = std::numeric_limits<S>::quiet_NaN();
      Matrix<S> yhat_store = Matrix<S>::Constant(stride, cols, S(7));
      Vector<S> s(cols);
      implicit::internal::LayerNormColumnsKernel<S>(y_store.data(), rows, cols, stride, eps, yhat_store.data(), stride,
                                                    s.data());
      BOOST_TEST((yhat_store.bottomRows(2).array() == S(7)).all(), "nothing written between the columns");
      for (Index b = 0; b < cols; ++b) {
        if (b == 2) {
          BOOST_TEST(std::isnan(s(b)));
          BOOST_TEST(yhat_store.col(b).head(rows).array().isNaN().all());
          continue;
        }
        long double mean = 0, var = 0;
        for (Index i = 0; i < rows; ++i) mean += y_store(i, b);
        mean /= rows;
        for (Index i = 0; i < rows; ++i) var += (y_store(i, b) - mean) * (y_store(i, b) - mean);
        const long double sb = std::sqrt(var / rows + eps);
        BOOST_TEST(std::abs(s(b) - sb) <= Tolerance<S>() * 4 * sb, "s " << b);
        for (Index i = 0; i < rows; ++i) {
          const long double expected = (y_store(i, b) - mean) / sb;
          BOOST_TEST(std::abs(yhat_store(i, b) - expected) <= Tolerance<S>() * 8 * (1 + std::abs(expected)),
                     "entry " << i << ", column " << b);
        }
        if (b == 1) BOOST_TEST((yhat_store.col(b).head(rows).array() == S(0)).all(), "a constant column");
      }
      Matrix<S> in_place = y_store;
      Vector<S> s_in_place(cols);
      implicit::internal::LayerNormColumnsKernel<S>(in_place.data(), rows, cols, stride, eps, in_place.data(), stride,
                                                    s_in_place.data());
      const Matrix<S> a = in_place.topRows(rows), b = yhat_store.topRows(rows);
      BOOST_TEST(((a.array() == b.array()) || (a.array().isNaN() && b.array().isNaN())).all());
      BOOST_TEST(((s_in_place.array() == s.array()) || (s_in_place.array().isNaN() && s.array().isNaN())).all());
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(levels_are_named_parsed_and_listed) {
  const auto levels = implicit::AvailableCpuLevels();
  BOOST_REQUIRE(!levels.empty());
  BOOST_TEST((levels.front() == CpuLevel::kGeneric));
  for (CpuLevel l : {CpuLevel::kGeneric, CpuLevel::kX86_64_V3, CpuLevel::kX86_64_V4}) {
    CpuLevel parsed;
    BOOST_TEST(implicit::ParseCpuLevel(implicit::ToString(l), &parsed));
    BOOST_TEST((parsed == l));
  }
  CpuLevel parsed;
  BOOST_TEST(!implicit::ParseCpuLevel("avx512", &parsed));
  if (std::getenv("IMPLICIT_CPU_LEVEL") == nullptr) {
    BOOST_TEST((implicit::ActiveCpuLevel() == levels.back()), "the highest level runs by default");
  }
  BOOST_TEST_MESSAGE("levels available here: " << levels.size() << ", active: "
                                                << implicit::ToString(implicit::ActiveCpuLevel()));
  LevelGuard guard;
  BOOST_CHECK_THROW(implicit::SetCpuLevel(static_cast<CpuLevel>(17)), std::invalid_argument);
  for (CpuLevel l : {CpuLevel::kX86_64_V3, CpuLevel::kX86_64_V4}) {
    bool available = false;
    for (CpuLevel a : levels) available = available || a == l;
    if (!available) BOOST_CHECK_THROW(implicit::SetCpuLevel(l), std::invalid_argument);
  }
}

BOOST_AUTO_TEST_CASE(every_level_computes_the_same_products_and_softmaxes) {
  LevelGuard guard;
  for (CpuLevel level : implicit::AvailableCpuLevels()) {
    BOOST_TEST_CONTEXT("level " << implicit::ToString(level)) {
      implicit::SetCpuLevel(level);
      BOOST_TEST((implicit::ActiveCpuLevel() == level));
      CheckGemm<float>();
      CheckGemm<double>();
      CheckSoftmax<float>();
      CheckSoftmax<double>();
      CheckSoftmaxExponentials<float>();
      CheckSoftmaxExponentials<double>();
      CheckBernoulli<float>();
      CheckBernoulli<double>();
      CheckBernoulliUlps<float>();
      CheckBernoulliUlps<double>();
      CheckTanh<float>();
      CheckTanh<double>();
      CheckLowRank<float>();
      CheckLowRank<double>();
      CheckCombine<float>();
      CheckCombine<double>();
      CheckClamp<float>();
      CheckClamp<double>();
      CheckLayerNorm<float>();
      CheckLayerNorm<double>();
      CheckHopfieldAgainstGeneric<float>(level);
      CheckHopfieldAgainstGeneric<double>(level);
      CheckEnergyTransformerAgainstGeneric<float>(level);
      CheckEnergyTransformerAgainstGeneric<double>(level);
    }
  }
}

// implicit::Tanh, the public entry point: views with a column stride, in
// place, the same numbers on one thread and on three (a large matrix's
// columns are shared), other scalar types through Eigen, and a wrong output
// shape refused.
BOOST_AUTO_TEST_CASE(tanh_works_on_views_in_place_and_on_any_thread_count) {
  const Matrix<double> x = Random<double>(130, 300, 61) * 2.0;
  Matrix<double> y(130, 300);
  implicit::Tanh<double>(x.topRows(100), y.topRows(100));
  for (Index j = 0; j < 300; ++j)
    for (Index i = 0; i < 100; ++i)
      BOOST_TEST(std::abs(y(i, j) - std::tanh(x(i, j))) <= 4 * 2.3e-16 * std::abs(std::tanh(x(i, j))));
  const int saved = Eigen::nbThreads();
  Matrix<double> one = x, three = x;
  Eigen::setNbThreads(1);
  implicit::Tanh<double>(one, one);
  Eigen::setNbThreads(3);
  implicit::Tanh<double>(three, three);
  Eigen::setNbThreads(saved);
  BOOST_TEST((one.array() == three.array()).all());
  BOOST_TEST((one.topRows(100).array() == y.topRows(100).array()).all());
  const Matrix<long double> xl = x.topLeftCorner(3, 4).cast<long double>();
  Matrix<long double> yl(3, 4);
  implicit::Tanh<long double>(xl, yl);
  BOOST_TEST((yl.array() == xl.array().tanh()).all());
  Matrix<double> wrong(130, 299);
  BOOST_CHECK_THROW(implicit::Tanh<double>(x, wrong), std::invalid_argument);
}
