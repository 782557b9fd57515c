// Checks of an energy's one-pass evaluations and of subset evaluation, shared
// by the layer tests (any Energy<S>, float or double):
//
//   CheckOnePassEvaluations(energy, x, tol)   CccpUpdateAndValue and
//       GradientAndValue agree with CccpUpdate + Value and Gradient + Value
//   CheckSubsetEvaluation(energy, x, tol)     energy.SupportsSubsets(), and
//       every evaluation on a subset of x's columns (reordered) equals those
//       columns of the evaluation on the whole batch
//   CheckColumnEvaluation(map, x, tol)        a map with per-sample data
//       evaluates compacted blocks of samples like the whole batch
//   CheckSameBitsOnThreads(energy, x, v)      the hot evaluations give the
//       same bits on 1 and 3 of Eigen's threads
//
// "Agree" is entry-wise, within tol times the largest finite entry (at least
// 1); equal infinities agree, and a NaN agrees only with a NaN. Pass
// cccp = false for energies whose CCCP update throws (log-normalisers, binary
// visible units).
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>

#include <boost/test/unit_test.hpp>

#include "support/test_problems.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace implicit {
namespace testing {

template <typename DerivedA, typename DerivedB>
bool AgreeEntrywise(const Eigen::MatrixBase<DerivedA>& a, const Eigen::MatrixBase<DerivedB>& b,
                    double tol) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  double scale = 1.0;
  for (Index j = 0; j < b.cols(); ++j)
    for (Index i = 0; i < b.rows(); ++i) {
      const double y = static_cast<double>(b(i, j));
      if (std::isfinite(y)) scale = std::max(scale, std::abs(y));
    }
  for (Index j = 0; j < a.cols(); ++j)
    for (Index i = 0; i < a.rows(); ++i) {
      const double x = static_cast<double>(a(i, j)), y = static_cast<double>(b(i, j));
      if (std::isnan(x) || std::isnan(y)) {
        if (!(std::isnan(x) && std::isnan(y))) return false;
        continue;
      }
      if (x == y) continue;  // also equal infinities
      if (!std::isfinite(x) || !std::isfinite(y)) return false;
      if (std::abs(x - y) > tol * scale) return false;
    }
  return true;
}

template <typename Scalar>
void CheckOnePassEvaluations(const Energy<Scalar>& energy, const Matrix<Scalar>& x, double tol,
                             bool cccp = true) {
  const Index n = x.rows(), B = x.cols();
  Vector<Scalar> e(B);
  energy.Value(x, e);
  // separate(out) against fused(out, values): the same out, and values = E.
  const auto check = [&](const char* name, const auto& separate, const auto& fused) {
    Matrix<Scalar> out(n, B), out1(n, B);
    Vector<Scalar> e1(B);
    separate(out);
    fused(out1, e1);
    BOOST_TEST_INFO(name << ": the step");
    BOOST_TEST(AgreeEntrywise(out1, out, tol));
    BOOST_TEST_INFO(name << ": the value");
    BOOST_TEST(AgreeEntrywise(e1, e, tol));
  };
  check("GradientAndValue", [&](Matrix<Scalar>& g) { energy.Gradient(x, g); },
        [&](Matrix<Scalar>& g, Vector<Scalar>& v) { energy.GradientAndValue(x, g, v); });
  check("DescentDirectionAndValue", [&](Matrix<Scalar>& d) { energy.DescentDirection(x, d); },
        [&](Matrix<Scalar>& d, Vector<Scalar>& v) { energy.DescentDirectionAndValue(x, d, v); });
  if (cccp) {
    check("CccpUpdateAndValue", [&](Matrix<Scalar>& c) { energy.CccpUpdate(x, c); },
          [&](Matrix<Scalar>& c, Vector<Scalar>& v) { energy.CccpUpdateAndValue(x, c, v); });
  }
}

template <typename Scalar>
void CheckSubsetEvaluation(const Energy<Scalar>& energy, const Matrix<Scalar>& x, double tol,
                           bool cccp = true) {
  BOOST_REQUIRE(energy.SupportsSubsets());
  const Index n = x.rows(), B = x.cols();
  BOOST_REQUIRE(B >= 3);
  const std::vector<Index> cols = {B - 1, 0, B / 2};  // reordered, not contiguous
  const Index k = static_cast<Index>(cols.size());
  const Matrix<Scalar> v = RandomMatrix<Scalar>(n, B, 977);
  Matrix<Scalar> xs(n, k), vs(n, k);
  for (Index j = 0; j < k; ++j) {
    xs.col(j) = x.col(cols[j]);
    vs.col(j) = v.col(cols[j]);
  }
  auto pick = [&](const Matrix<Scalar>& full) {
    Matrix<Scalar> m(full.rows(), k);
    for (Index j = 0; j < k; ++j) m.col(j) = full.col(cols[j]);
    return m;
  };
  auto check = [&](const char* what, const Matrix<Scalar>& subset, const Matrix<Scalar>& full) {
    BOOST_TEST_INFO(what);
    BOOST_TEST(AgreeEntrywise(subset, pick(full), tol));
  };
  Vector<Scalar> e(B), es(k);
  energy.Value(x, e);
  energy.Value(xs, es);
  check("Value", es.transpose(), e.transpose());
  Matrix<Scalar> f(n, B), fs(n, k);
  energy.Gradient(x, f);
  energy.Gradient(xs, fs);
  check("Gradient", fs, f);
  energy.DescentDirection(x, f);
  energy.DescentDirection(xs, fs);
  check("DescentDirection", fs, f);
  energy.HessianVectorProduct(x, v, f);
  energy.HessianVectorProduct(xs, vs, fs);
  check("HessianVectorProduct", fs, f);
  energy.GradientAndValue(x, f, e);
  energy.GradientAndValue(xs, fs, es);
  check("GradientAndValue: gradient", fs, f);
  check("GradientAndValue: value", es.transpose(), e.transpose());
  if (cccp) {
    energy.CccpUpdate(x, f);
    energy.CccpUpdate(xs, fs);
    check("CccpUpdate", fs, f);
    energy.CccpUpdateAndValue(x, f, e);
    energy.CccpUpdateAndValue(xs, fs, es);
    check("CccpUpdateAndValue: update", fs, f);
    check("CccpUpdateAndValue: value", es.transpose(), e.transpose());
  }
}

// A map with per-sample data (FixedPointMap::EvaluateColumns): a compacted
// block of some of x's samples, evaluated with their column indices, equals
// those columns of the whole batch's evaluation (and E there, when the map has
// an energy; its JVP, when it has column JVPs); column lists that do not fit
// the block or the batch throw.
template <typename Scalar>
void CheckColumnEvaluation(const FixedPointMap<Scalar>& map, const Matrix<Scalar>& x, double tol) {
  BOOST_REQUIRE(map.SupportsColumnSubsets());
  const Index n = x.rows(), B = x.cols();
  BOOST_REQUIRE(B >= 3);
  const std::vector<Index> cols = {1, B - 1};  // ascending, not the batch's first columns
  const Index k = static_cast<Index>(cols.size());
  Matrix<Scalar> xs(n, k), f(n, B), fs(n, k), picked(n, k);
  for (Index j = 0; j < k; ++j) xs.col(j) = x.col(cols[j]);
  map.Evaluate(x, f);
  map.EvaluateColumns(xs, cols, fs);
  for (Index j = 0; j < k; ++j) picked.col(j) = f.col(cols[j]);
  BOOST_TEST(AgreeEntrywise(fs, picked, tol));
  if (map.energy() != nullptr) {
    Vector<Scalar> e(B), es(k), picked_e(k), e_with(B);
    map.energy()->Value(x, e);
    Matrix<Scalar> f_with(n, B);
    map.EvaluateWithEnergy(x, f_with, e_with);  // the whole batch in one pass
    BOOST_TEST(AgreeEntrywise(f_with, f, tol));
    BOOST_TEST(AgreeEntrywise(e_with, e, tol));
    fs.setZero();
    map.EvaluateColumnsWithEnergy(xs, cols, fs, es);
    for (Index j = 0; j < k; ++j) picked_e(j) = e(cols[j]);
    BOOST_TEST(AgreeEntrywise(fs, picked, tol));
    BOOST_TEST(AgreeEntrywise(es.transpose(), picked_e.transpose(), tol));
  }
  // Column JVPs (where the map has them) equal the whole batch's JVP columns.
  Matrix<Scalar> v = RandomMatrix<Scalar>(n, B, 977), jv(n, B), vs(n, k), jvs(n, k);
  for (Index j = 0; j < k; ++j) vs.col(j) = v.col(cols[j]);
  if (map.SupportsColumnJacobianProducts()) {
    map.JacobianVectorProduct(x, v, jv);
    map.JacobianVectorProductColumns(xs, cols, vs, jvs);
    for (Index j = 0; j < k; ++j) picked.col(j) = jv.col(cols[j]);
    BOOST_TEST(AgreeEntrywise(jvs, picked, tol));
  }
  std::vector<std::vector<Index>> bad = {{1}, {B - 1, 1}, {-1, 1}};
  if (!map.SupportsSubsets()) bad.push_back({1, B});  // per-sample data: only B samples
  for (const std::vector<Index>& columns : bad) {
    BOOST_CHECK_THROW(map.EvaluateColumns(xs, columns, fs), std::invalid_argument);
    if (map.SupportsColumnJacobianProducts()) {
      BOOST_CHECK_THROW(map.JacobianVectorProductColumns(xs, columns, vs, jvs), std::invalid_argument);
    }
  }
}

// CccpUpdateAndValue, GradientAndValue, Value and HessianVectorProduct (in
// direction v) give the same bits on 1 and 3 of Eigen's threads
// (energies that cut a batch into column blocks from its size alone,
// internal::ColumnBlocks). Leaves Eigen's thread count as it found it.
template <typename Scalar>
void CheckSameBitsOnThreads(const Energy<Scalar>& energy, const Matrix<Scalar>& x, const Matrix<Scalar>& v) {
  const Index n = x.rows(), B = x.cols();
  const int threads_before = Eigen::nbThreads();
  struct Results {
    Matrix<Scalar> out, grad, hv;
    Vector<Scalar> e, e2, e3;
  };
  const auto evaluate = [&](int threads) {
    Eigen::setNbThreads(threads);
    Results r{Matrix<Scalar>(n, B), Matrix<Scalar>(n, B), Matrix<Scalar>(n, B),
              Vector<Scalar>(B), Vector<Scalar>(B), Vector<Scalar>(B)};
    energy.CccpUpdateAndValue(x, r.out, r.e);
    energy.GradientAndValue(x, r.grad, r.e2);
    energy.Value(x, r.e3);
    energy.HessianVectorProduct(x, v, r.hv);
    return r;
  };
  const Results one = evaluate(1), three = evaluate(3);
  Eigen::setNbThreads(threads_before);
  BOOST_TEST(AgreeEntrywise(three.out, one.out, 0.0));
  BOOST_TEST(AgreeEntrywise(three.grad, one.grad, 0.0));
  BOOST_TEST(AgreeEntrywise(three.hv, one.hv, 0.0));
  BOOST_TEST(AgreeEntrywise(three.e, one.e, 0.0));
  BOOST_TEST(AgreeEntrywise(three.e2, one.e2, 0.0));
  BOOST_TEST(AgreeEntrywise(three.e3, one.e3, 0.0));
}

}  // namespace testing
}  // namespace implicit
