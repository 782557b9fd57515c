// Checks that the two modes of AutoDiffEnergy (forward: dual numbers; reverse:
// the tape) give the same products of one functor, shared by the tests of
// reverse mode (test/core/reverse_autodiff_test.cc, eigen_expressions_test.cc).
//
//   implicit::testing::ModePair<MyFunctor, double> pair(energy);
//   implicit::testing::CheckAllProducts(pair.forward, pair.reverse, x, v, "my energy");
#pragma once

#include <implicit/core/autodiff_energy.h>

#include <boost/test/unit_test.hpp>

#include <string>
#include <type_traits>

namespace implicit {
namespace testing {

template <typename Scalar>
double Tolerance() {
  return std::is_same<Scalar, float>::value ? 2e-5 : 1e-11;
}

template <typename Scalar>
void CheckClose(const Matrix<Scalar>& reverse, const Matrix<Scalar>& forward,
                const std::string& what) {
  const double scale = 1.0 + static_cast<double>(forward.template cast<double>().norm());
  const double error = (reverse - forward).template cast<double>().norm();
  BOOST_TEST(error <= Tolerance<Scalar>() * scale,
             what << ": reverse differs from forward by " << error << " (|forward| " << scale
                  << ")");
}

// Every product of `reverse` equals that of `forward` (the same energy in the
// other mode) at x, with direction v; with an input when E takes one.
template <typename Functor, typename Scalar>
void CheckAllProducts(const implicit::AutoDiffEnergy<Functor, Scalar>& forward,
                      const implicit::AutoDiffEnergy<Functor, Scalar>& reverse, const Matrix<Scalar>& x,
                      const Matrix<Scalar>& v, const std::string& name) {
  const Index n = x.rows(), B = x.cols();
  BOOST_REQUIRE(!forward.uses_reverse_mode());
  BOOST_REQUIRE(reverse.uses_reverse_mode());
  Matrix<Scalar> gf(n, B), gr(n, B), hf(n, B), hr(n, B);
  Vector<Scalar> ef(B), er(B), vf(B);
  forward.GradientAndValue(x, gf, ef);
  reverse.GradientAndValue(x, gr, er);
  forward.Value(x, vf);
  CheckClose<Scalar>(gr, gf, name + " gradient (GradientAndValue)");
  CheckClose<Scalar>(er, vf, name + " value (GradientAndValue)");
  reverse.Gradient(x, gr);
  CheckClose<Scalar>(gr, gf, name + " gradient");
  forward.HessianVectorProduct(x, v, hf);
  reverse.HessianVectorProduct(x, v, hr);
  CheckClose<Scalar>(hr, hf, name + " Hessian-vector product");
  // The Hessian recorded once at x (a linearizing recording per sample):
  // products in two directions, both ways, equal forward mode's.
  {
    const auto hessian = reverse.LinearizeHessian(x);
    const auto* recorded =
        dynamic_cast<const typename implicit::AutoDiffEnergy<Functor, Scalar>::RecordedHessian*>(hessian.get());
    BOOST_REQUIRE(recorded != nullptr);
    BOOST_TEST(recorded->samples_recorded() == B, name << ": every sample's recording kept");
    Matrix<Scalar> kept(n, B);
    hessian->JacobianVectorProduct(v, kept);
    CheckClose<Scalar>(kept, hf, name + " recorded Hessian (JVP)");
    const Matrix<Scalar> w = ((Scalar(-2) * v).array() + Scalar(0.25)).matrix();
    Matrix<Scalar> hw(n, B);
    forward.HessianVectorProduct(x, w, hw);
    hessian->VectorJacobianProduct(w, kept);
    CheckClose<Scalar>(kept, hw, name + " recorded Hessian (VJP, a second direction)");
  }
  const Index p = forward.num_parameters();
  Vector<Scalar> pf(p), pr(p);
  forward.ParameterVectorJacobianProduct(x, v, pf);
  reverse.ParameterVectorJacobianProduct(x, v, pr);
  CheckClose<Scalar>(pr, pf, name + " parameter VJP");
  if (forward.input_dimension() > 0) {
    Matrix<Scalar> cf(forward.input_dimension(), B), cr(forward.input_dimension(), B);
    forward.InputVectorJacobianProduct(x, v, cf);
    reverse.InputVectorJacobianProduct(x, v, cr);
    CheckClose<Scalar>(cr, cf, name + " input VJP");
  }
}

template <typename Functor, typename Scalar>
struct ModePair {
  implicit::AutoDiffEnergy<Functor, Scalar> forward, reverse;
  ModePair(const implicit::AutoDiffEnergy<Functor, Scalar>& energy) : forward(energy), reverse(energy) {
    forward.set_mode(implicit::AutoDiffMode::kForward);
    reverse.set_mode(implicit::AutoDiffMode::kReverse);
  }
};

}  // namespace testing
}  // namespace implicit
