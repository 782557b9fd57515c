// Derivative checks shared by the regularised-attention, Energy Transformer
// and DEQ-wrapper tests: a closed-form energy (or map) against an automatic
// reference and against central finite differences.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>

#include "support/test_problems.h"

#include <boost/test/unit_test.hpp>

#include <cmath>

namespace implicit {
namespace testing {

inline double RelativeError(const Matrix<double>& a, const Matrix<double>& b) {
  return (a - b).norm() / (1.0 + b.norm());
}

// Gradient, Hessian-vector product, descent direction and parameter VJP of
// `energy` against `reference` (same parameter layout), to `tol` relative.
inline void CheckEnergyAgainstReference(Energy<double>& energy, Energy<double>& reference,
                                        const Matrix<double>& x, double tol) {
  const Index n = x.rows(), B = x.cols();
  Vector<double> e1(B), e2(B);
  energy.Value(x, e1);
  reference.Value(x, e2);
  BOOST_TEST((e1 - e2).norm() <= tol * (1 + e2.norm()));
  Matrix<double> g1(n, B), g2(n, B);
  energy.Gradient(x, g1);
  reference.Gradient(x, g2);
  BOOST_TEST(RelativeError(g1, g2) <= tol);
  const Matrix<double> v = RandomMatrix<double>(n, B, 77);
  energy.HessianVectorProduct(x, v, g1);
  reference.HessianVectorProduct(x, v, g2);
  BOOST_TEST(RelativeError(g1, g2) <= tol);
  BOOST_REQUIRE(energy.num_parameters() == reference.num_parameters());
  if (energy.num_parameters() > 0) {
    const Matrix<double> u = RandomMatrix<double>(n, B, 78);
    Vector<double> p1(energy.num_parameters()), p2(energy.num_parameters());
    energy.ParameterVectorJacobianProduct(x, u, p1);
    reference.ParameterVectorJacobianProduct(x, u, p2);
    BOOST_TEST(RelativeError(p1, p2) <= tol);
  }
}

// Gradient (per coordinate), HVP (along a random direction) and parameter VJP
// (per parameter) against central differences of Value / Gradient.
inline void CheckEnergyFiniteDifferences(Energy<double>& energy, const Matrix<double>& x,
                                         double tol, double h = 1e-5) {
  const Index n = x.rows(), B = x.cols();
  Matrix<double> grad(n, B), hv(n, B), fd_grad(n, B);
  energy.Gradient(x, grad);
  Vector<double> ep(B), em(B);
  for (Index i = 0; i < n; ++i) {
    Matrix<double> xp = x, xm = x;
    xp.row(i).array() += h;
    xm.row(i).array() -= h;
    energy.Value(xp, ep);
    energy.Value(xm, em);
    fd_grad.row(i) = ((ep - em) / (2 * h)).transpose();
  }
  BOOST_TEST(RelativeError(grad, fd_grad) <= tol);
  const Matrix<double> v = RandomMatrix<double>(n, B, 79);
  energy.HessianVectorProduct(x, v, hv);
  Matrix<double> gp(n, B), gm(n, B);
  energy.Gradient(x + h * v, gp);
  energy.Gradient(x - h * v, gm);
  BOOST_TEST(RelativeError(hv, (gp - gm) / (2 * h)) <= tol);
  if (energy.num_parameters() > 0) {
    const Matrix<double> u = RandomMatrix<double>(n, B, 80);
    Vector<double> pvjp(energy.num_parameters()), fd(energy.num_parameters());
    energy.ParameterVectorJacobianProduct(x, u, pvjp);
    Vector<double>& theta = energy.parameters()->values();
    for (Index k = 0; k < theta.size(); ++k) {
      const double saved = theta(k);
      theta(k) = saved + h;
      energy.Gradient(x, gp);
      theta(k) = saved - h;
      energy.Gradient(x, gm);
      theta(k) = saved;
      fd(k) = ((gp - gm).array() * u.array()).sum() / (2 * h);
    }
    BOOST_TEST(RelativeError(pvjp, fd) <= tol);
  }
}

// JVP, VJP (adjointness), parameter and input VJPs of a map against central
// differences of Evaluate. `set_input` replaces the map's input (or is empty).
template <typename SetInput>
void CheckMapFiniteDifferences(FixedPointMap<double>& map, const Matrix<double>& z,
                               const Matrix<double>& input, SetInput set_input, double tol,
                               double h = 1e-6) {
  const Index n = z.rows(), B = z.cols();
  const Matrix<double> v = RandomMatrix<double>(n, B, 81), u = RandomMatrix<double>(n, B, 82);
  Matrix<double> jv(n, B), ju(n, B), fp(n, B), fm(n, B);
  map.JacobianVectorProduct(z, v, jv);
  map.Evaluate(z + h * v, fp);
  map.Evaluate(z - h * v, fm);
  BOOST_TEST(RelativeError(jv, (fp - fm) / (2 * h)) <= tol);
  map.VectorJacobianProduct(z, u, ju);
  const double lhs = (u.array() * jv.array()).sum(), rhs = (ju.array() * v.array()).sum();
  BOOST_TEST(std::abs(lhs - rhs) <= tol * (1 + std::abs(lhs)));
  if (map.num_parameters() > 0) {
    Vector<double> pvjp(map.num_parameters()), fd(map.num_parameters());
    map.ParameterVectorJacobianProduct(z, u, pvjp);
    Vector<double>& theta = map.parameters()->values();
    for (Index k = 0; k < theta.size(); ++k) {
      const double saved = theta(k);
      theta(k) = saved + h;
      map.Evaluate(z, fp);
      theta(k) = saved - h;
      map.Evaluate(z, fm);
      theta(k) = saved;
      fd(k) = ((fp - fm).array() * u.array()).sum() / (2 * h);
    }
    BOOST_TEST(RelativeError(pvjp, fd) <= tol);
  }
  if (map.input_dimension() > 0) {
    const Index p = map.input_dimension();
    Matrix<double> ivjp(p, B), fd(p, B);
    map.InputVectorJacobianProduct(z, u, ivjp);
    for (Index i = 0; i < p; ++i) {
      Matrix<double> xp = input, xm = input;
      xp.row(i).array() += h;
      xm.row(i).array() -= h;
      set_input(xp);
      map.Evaluate(z, fp);
      set_input(xm);
      map.Evaluate(z, fm);
      fd.row(i) = ((fp - fm).array() * u.array()).colwise().sum() / (2 * h);
    }
    set_input(input);
    BOOST_TEST(RelativeError(ivjp, fd) <= tol);
  }
}

}  // namespace testing
}  // namespace implicit
