// The derivative checks of energy_checks.h, compiled once for all the tests.
#include "support/energy_checks.h"

#include <implicit/core/energy_maps.h>

#include <stdexcept>
#include <vector>

namespace implicit {
namespace testing {

void CheckEnergyAgainstReference(Energy<double>& closed, Energy<double>& reference,
                                 const Matrix<double>& x, double tol,
                                 const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    const Index n = x.rows(), B = x.cols();
    BOOST_REQUIRE_EQUAL(closed.dimension(), reference.dimension());
    BOOST_REQUIRE_EQUAL(closed.num_parameters(), reference.num_parameters());
    Vector<double> e1(B), e2(B);
    closed.Value(x, e1);
    reference.Value(x, e2);
    BOOST_TEST(RelativeError(e1, e2) <= tol);
    Matrix<double> g1(n, B), g2(n, B);
    closed.Gradient(x, g1);
    reference.Gradient(x, g2);
    BOOST_TEST(RelativeError(g1, g2) <= tol);
    const Matrix<double> v = RandomMatrix<double>(n, B, 101);
    Matrix<double> h1(n, B), h2(n, B);
    closed.HessianVectorProduct(x, v, h1);
    reference.HessianVectorProduct(x, v, h2);
    BOOST_TEST(RelativeError(h1, h2) <= tol);
    if (closed.num_parameters() > 0) {
      const Matrix<double> u = RandomMatrix<double>(n, B, 103);
      Vector<double> p1(closed.num_parameters()), p2(closed.num_parameters());
      closed.ParameterVectorJacobianProduct(x, u, p1);
      reference.ParameterVectorJacobianProduct(x, u, p2);
      BOOST_TEST(RelativeError(p1, p2) <= tol);
    }
  }
}

void CheckEnergyFiniteDifferences(Energy<double>& energy, const Matrix<double>& x,
                                  double tol, const std::string& what,
                                  double h) {
  BOOST_TEST_CONTEXT(what) {
    const Index n = x.rows(), B = x.cols();
    Matrix<double> grad(n, B), fd(n, B);
    energy.Gradient(x, grad);
    Vector<double> ep(B), em(B);
    for (Index i = 0; i < n; ++i) {
      Matrix<double> xp = x, xm = x;
      xp.row(i).array() += h;
      xm.row(i).array() -= h;
      energy.Value(xp, ep);
      energy.Value(xm, em);
      fd.row(i) = ((ep - em) / (2 * h)).transpose();
    }
    BOOST_TEST(RelativeError(grad, fd) <= tol);
    const Matrix<double> v = RandomMatrix<double>(n, B, 107);
    Matrix<double> hv(n, B), gp(n, B), gm(n, B);
    energy.HessianVectorProduct(x, v, hv);
    energy.Gradient(x + h * v, gp);
    energy.Gradient(x - h * v, gm);
    BOOST_TEST(RelativeError(hv, (gp - gm) / (2 * h)) <= tol);
    {
      // The Hessian kept at x (Energy::LinearizeHessian; overridden by the
      // attention energies) gives the same products, both ways, at x even after
      // the caller's x changed; the gradient-step map's linearisation I - a H.
      Matrix<double> moved = x;
      const auto hessian = energy.LinearizeHessian(moved);
      moved.setZero();
      Matrix<double> kept(n, B);
      hessian->JacobianVectorProduct(v, kept);
      BOOST_TEST(RelativeError(kept, hv) <= 1e-12);
      hessian->VectorJacobianProduct(v, kept);
      BOOST_TEST(RelativeError(kept, hv) <= 1e-12);
      const GradientStepMap<double> step_map(energy, 0.3);
      const auto step_jacobian = step_map.Linearize(x);
      step_jacobian->VectorJacobianProduct(v, kept);
      BOOST_TEST(RelativeError(kept, (v - 0.3 * hv).eval()) <= 1e-12);
      // Products on a subset of the point's samples (Newton-CG's), where the
      // linearisation has them: the last sample and every other one before it.
      BOOST_TEST(step_jacobian->HasColumnProducts() == hessian->HasColumnProducts());
      if (hessian->HasColumnProducts()) {
        std::vector<Index> columns;
        for (Index b = B % 2 == 0 ? 1 : 0; b < B; b += 2) columns.push_back(b);
        const Index k = static_cast<Index>(columns.size());
        Matrix<double> sub(n, k), out(n, k), want(n, k), step_want(n, k);
        for (Index j = 0; j < k; ++j) {
          sub.col(j) = v.col(columns[j]);
          want.col(j) = hv.col(columns[j]);
        }
        step_want = sub - 0.3 * want;
        hessian->JacobianVectorProductColumns(columns, sub, out);
        BOOST_TEST(RelativeError(out, want) <= 1e-12);
        step_jacobian->JacobianVectorProductColumns(columns, sub, out);
        BOOST_TEST(RelativeError(out, step_want) <= 1e-12);
        const std::vector<Index> outside{B};  // not a sample of the point
        BOOST_CHECK_THROW(hessian->JacobianVectorProductColumns(outside, sub.leftCols(1), out.leftCols(1)),
                          std::invalid_argument);
      }
      // The update, E and the Hessian from one call (EvaluateAndLinearizeHessian:
      // the separable energies' own pass, the others' two calls) equal the
      // separate calls', for both updates, and so do the maps' (Newton-CG's).
      Matrix<double> want(n, B), got(n, B);
      Vector<double> want_values(B), got_values(B);
      energy.GradientAndValue(x, want, want_values);
      auto fused = energy.EvaluateAndLinearizeHessian(x, EnergyUpdate::kGradient, got, got_values);
      BOOST_TEST(RelativeError(got, want) <= 1e-14);
      BOOST_TEST(RelativeError(got_values, want_values) <= 1e-14);
      fused->JacobianVectorProduct(v, kept);
      BOOST_TEST(RelativeError(kept, hv) <= 1e-12);
      BOOST_TEST(fused->HasColumnProducts() == hessian->HasColumnProducts());
      step_map.EvaluateWithEnergy(x, want, want_values);
      fused = step_map.EvaluateWithEnergyAndLinearize(x, got, got_values);
      BOOST_TEST(RelativeError(got, want) <= 1e-14);
      BOOST_TEST(RelativeError(got_values, want_values) <= 1e-14);
      fused->JacobianVectorProduct(v, kept);
      BOOST_TEST(RelativeError(kept, (v - 0.3 * hv).eval()) <= 1e-12);
      bool has_cccp = true;
      try {
        energy.CccpUpdateAndValue(x, want, want_values);
      } catch (const std::logic_error&) {  // (binary RBM units)
        has_cccp = false;
      }
      if (has_cccp) {
        const CccpMap<double> cccp_map(energy);
        fused = cccp_map.EvaluateWithEnergyAndLinearize(x, got, got_values);
        BOOST_TEST(RelativeError(got, want) <= 1e-14);
        BOOST_TEST(RelativeError(got_values, want_values) <= 1e-14);
        fused->JacobianVectorProduct(v, kept);
        BOOST_TEST(RelativeError(kept, (v - hv).eval()) <= 1e-12);
        BOOST_TEST(cccp_map.LinearizesWithEvaluation() == energy.LinearizesWithEvaluation());
      } else {
        BOOST_CHECK_THROW(energy.EvaluateAndLinearizeHessian(x, EnergyUpdate::kCccp, got, got_values),
                          std::logic_error);
      }
    }
    if (energy.num_parameters() > 0) {
      const Matrix<double> u = RandomMatrix<double>(n, B, 109);
      Vector<double> pvjp(energy.num_parameters()), fdp(energy.num_parameters());
      energy.ParameterVectorJacobianProduct(x, u, pvjp);
      Vector<double>& theta = energy.parameters()->values();
      for (Index k = 0; k < theta.size(); ++k) {
        const double saved = theta(k);
        theta(k) = saved + h;
        energy.Gradient(x, gp);
        theta(k) = saved - h;
        energy.Gradient(x, gm);
        theta(k) = saved;
        fdp(k) = ((gp - gm).array() * u.array()).sum() / (2 * h);
      }
      BOOST_TEST(RelativeError(pvjp, fdp) <= tol);
    }
  }
}

void CheckMapFiniteDifferences(
    FixedPointMap<double>& map, const Matrix<double>& z, double tol, const std::string& what,
    ParameterSet<double>* params,
    const std::function<void(const Matrix<double>&)>& set_input,
    const Matrix<double>& input, double h) {
  BOOST_TEST_CONTEXT(what) {
    const Index n = z.rows(), B = z.cols();
    const Matrix<double> v = RandomMatrix<double>(n, B, 113);
    const Matrix<double> u = RandomMatrix<double>(n, B, 127);
    Matrix<double> jv(n, B), fp(n, B), fm(n, B), jtu(n, B);
    map.JacobianVectorProduct(z, v, jv);
    map.Evaluate(z + h * v, fp);
    map.Evaluate(z - h * v, fm);
    BOOST_TEST(RelativeError(jv, (fp - fm) / (2 * h)) <= tol);
    // <u, J v> = <J^T u, v> per sample.
    map.VectorJacobianProduct(z, u, jtu);
    for (Index b = 0; b < B; ++b) {
      const double lhs = u.col(b).dot(jv.col(b)), rhs = jtu.col(b).dot(v.col(b));
      BOOST_TEST(std::abs(lhs - rhs) <= tol * (1 + std::abs(lhs)));
    }
    if (params != nullptr && map.num_parameters() > 0) {
      Vector<double> pvjp(map.num_parameters()), fdp(map.num_parameters());
      map.ParameterVectorJacobianProduct(z, u, pvjp);
      Vector<double>& theta = params->values();
      for (Index k = 0; k < theta.size(); ++k) {
        const double saved = theta(k);
        theta(k) = saved + h;
        map.Evaluate(z, fp);
        theta(k) = saved - h;
        map.Evaluate(z, fm);
        theta(k) = saved;
        fdp(k) = ((fp - fm).array() * u.array()).sum() / (2 * h);
      }
      BOOST_TEST(RelativeError(pvjp, fdp) <= tol);
    }
    if (set_input && map.input_dimension() > 0) {
      Matrix<double> ivjp(map.input_dimension(), B), fdi(map.input_dimension(), B);
      map.InputVectorJacobianProduct(z, u, ivjp);
      for (Index i = 0; i < input.rows(); ++i) {
        Matrix<double> cp = input, cm = input;
        cp.row(i).array() += h;
        cm.row(i).array() -= h;
        set_input(cp);
        map.Evaluate(z, fp);
        set_input(cm);
        map.Evaluate(z, fm);
        fdi.row(i) = ((fp - fm).array() * u.array()).colwise().sum() / (2 * h);
      }
      set_input(input);
      BOOST_TEST(RelativeError(ivjp, fdi) <= tol);
    }
  }
}

}  // namespace testing
}  // namespace implicit
