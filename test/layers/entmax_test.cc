// Regularised argmax over the simplex (entmax.h): the closed forms solve the
// optimisation problem they claim to solve, agree with each other and with
// bisection, have the stated Jacobians, and survive extreme inputs.
#define BOOST_TEST_MODULE entmax
#include <boost/test/unit_test.hpp>

#include <implicit/layers/entmax.h>

#include "support/test_problems.h"

#include <cmath>
#include <limits>

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
namespace entmax = implicit::entmax;
using implicit::testing::RandomMatrix;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

Matrix<double> Apply(const Matrix<double>& s, double alpha) {
  Matrix<double> p(s.rows(), s.cols());
  entmax::Entmax<double>(s, alpha, p);
  return p;
}

// Euclidean projection onto the simplex by bisection on the threshold (an
// independent implementation: no sorting).
Vector<double> ProjectSimplex(const Vector<double>& y) {
  double lo = y.minCoeff() - 1, hi = y.maxCoeff();
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    if ((y.array() - mid).max(0.0).sum() >= 1) lo = mid; else hi = mid;
  }
  return (y.array() - lo).max(0.0).matrix();
}

// KKT conditions of argmax <p,s> - Omega_alpha(p) over the simplex:
// s_i - dOmega/dp_i = c on the support, s_i - dOmega/dp_i(0) <= c off it,
// with dOmega/dp_i = p_i^{alpha-1}/(alpha-1) (alpha > 1).
void CheckKkt(const Vector<double>& s, const Vector<double>& p, double alpha, double tol) {
  BOOST_TEST(std::abs(p.sum() - 1) <= tol);
  BOOST_TEST(p.minCoeff() >= 0.0);
  double c = 0;
  int support = 0;
  for (Index i = 0; i < s.size(); ++i) {
    if (p(i) > 0) {
      c += s(i) - std::pow(p(i), alpha - 1) / (alpha - 1);
      ++support;
    }
  }
  c /= support;
  for (Index i = 0; i < s.size(); ++i) {
    if (p(i) > 0) {
      BOOST_TEST(std::abs(s(i) - std::pow(p(i), alpha - 1) / (alpha - 1) - c) <= tol);
    } else if (std::isfinite(s(i))) {
      BOOST_TEST(s(i) <= c + tol);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(softmax_solves_the_shannon_regularised_argmax) {
  // Mirror ascent (exponentiated gradient) on <p,s> - sum p log p over the
  // simplex: p <- p exp(eta (s - log p - 1)) / Z.
  Matrix<double> s = RandomMatrix<double>(7, 3, 1, 2.0);
  s(2, 1) = -kInf;  // masked entry: the solver keeps it at weight 0
  const Matrix<double> p = Apply(s, 1.0);
  for (Index b = 0; b < s.cols(); ++b) {
    Vector<double> q = Vector<double>::Constant(s.rows(), 1.0);
    if (b == 1) q(2) = 0;
    q /= q.sum();
    for (int it = 0; it < 400; ++it) {
      for (Index i = 0; i < q.size(); ++i) {
        if (q(i) > 0) q(i) *= std::exp(0.5 * (s(i, b) - std::log(q(i)) - 1));
      }
      q /= q.sum();
    }
    BOOST_TEST((q - p.col(b)).norm() <= 1e-10);
  }
  BOOST_TEST(p(2, 1) == 0.0);
}

BOOST_AUTO_TEST_CASE(sparsemax_is_the_euclidean_projection_onto_the_simplex) {
  const Matrix<double> s = RandomMatrix<double>(9, 4, 2, 1.5);
  Matrix<double> p(9, 4);
  entmax::Sparsemax<double>(s, p);
  for (Index b = 0; b < s.cols(); ++b) {
    BOOST_TEST((p.col(b) - ProjectSimplex(s.col(b))).norm() <= 1e-12);
    // Projected gradient ascent on <p,s> - 0.5 |p|^2 reaches the same point.
    Vector<double> q = Vector<double>::Constant(9, 1.0 / 9);
    for (int it = 0; it < 200; ++it) q = ProjectSimplex(q + 0.5 * (s.col(b) - q));
    BOOST_TEST((q - p.col(b)).norm() <= 1e-10);
  }
  BOOST_TEST((p.array() == 0).count() > 0);  // sparse
}

BOOST_AUTO_TEST_CASE(entmax_satisfies_the_optimality_conditions) {
  const Matrix<double> s = RandomMatrix<double>(12, 3, 3, 2.0);
  for (double alpha : {1.2, 1.5, 1.7, 2.0, 3.0}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      const Matrix<double> p = Apply(s, alpha);
      for (Index b = 0; b < s.cols(); ++b) CheckKkt(s.col(b), p.col(b), alpha, 1e-9);
    }
  }
}

BOOST_AUTO_TEST_CASE(closed_forms_equal_bisection) {
  const Matrix<double> s = RandomMatrix<double>(15, 5, 4, 3.0);
  Matrix<double> closed(15, 5), bisect(15, 5);
  entmax::Entmax15<double>(s, closed);
  entmax::Bisect<double>(s, 1.5, bisect);
  BOOST_TEST((closed - bisect).cwiseAbs().maxCoeff() <= 1e-12);
  entmax::Sparsemax<double>(s, closed);
  entmax::Bisect<double>(s, 2.0, bisect);
  BOOST_TEST((closed - bisect).cwiseAbs().maxCoeff() <= 1e-12);
  // alpha = 2 of the dispatcher is sparsemax, and bisection just off 1.5 and
  // 2 is continuous with the closed forms.
  BOOST_TEST((Apply(s, 2.0) - closed).norm() == 0.0);
  BOOST_TEST((Apply(s, 2.0 + 1e-7) - closed).norm() <= 1e-5);
  entmax::Entmax15<double>(s, closed);
  BOOST_TEST((Apply(s, 1.5 + 1e-7) - closed).norm() <= 1e-5);
}

// The closed forms sort only the entries that can be in the support (shifted
// score >= -1, with a margin): columns with most entries far below the
// maximum, and entries right at that bound, still give the bisection's
// weights and satisfy the optimality conditions.
BOOST_AUTO_TEST_CASE(closed_forms_with_entries_at_and_below_the_support_bound) {
  const Index N = 400;
  Matrix<double> s = RandomMatrix<double>(N, 4, 5, 40.0);  // a wide spread: few entries near the max
  const double m0 = s.col(0).maxCoeff(), m1 = s.col(1).maxCoeff();
  s(3, 0) = m0 - 2.0;  // z = (s - m) / 2 = -1 exactly: the 1.5-entmax bound
  s(4, 0) = m0 - 2.0 * (1.0 + 1e-4);  // inside the margin, outside the support
  s(3, 1) = m1 - 1.0;  // z = s - m = -1 exactly: the sparsemax bound
  s(4, 1) = m1 - 0.999;
  s.col(2).setConstant(1.0);  // all tied: uniform weights
  s(7, 3) = s.col(3).maxCoeff() + 100.0;  // one dominant entry: weight 1
  Matrix<double> closed(N, 4), bisect(N, 4);
  entmax::Entmax15<double>(s, closed);
  entmax::Bisect<double>(s, 1.5, bisect);
  BOOST_TEST((closed - bisect).cwiseAbs().maxCoeff() <= 1e-12);
  for (Index b = 0; b < 4; ++b) CheckKkt(s.col(b), closed.col(b), 1.5, 1e-9);
  BOOST_TEST(closed(3, 0) == 0.0);
  BOOST_TEST((closed.col(2).array() == closed(0, 2)).all());
  BOOST_TEST(closed(7, 3) == 1.0);
  entmax::Sparsemax<double>(s, closed);
  entmax::Bisect<double>(s, 2.0, bisect);
  BOOST_TEST((closed - bisect).cwiseAbs().maxCoeff() <= 1e-12);
  for (Index b = 0; b < 4; ++b) CheckKkt(s.col(b), closed.col(b), 2.0, 1e-9);
  BOOST_TEST(closed(3, 1) == 0.0);
  BOOST_TEST(closed(7, 3) == 1.0);
}

BOOST_AUTO_TEST_CASE(entmax_approaches_softmax_as_alpha_tends_to_one) {
  const Matrix<double> s = RandomMatrix<double>(10, 4, 5, 1.0);
  const Matrix<double> soft = Apply(s, 1.0);
  double previous = kInf;
  for (double gap : {1e-1, 1e-2, 1e-3}) {
    const double err = (Apply(s, 1.0 + gap) - soft).cwiseAbs().maxCoeff();
    BOOST_TEST(err < previous);
    BOOST_TEST(err <= 2 * gap);  // first-order convergence in alpha - 1
    previous = err;
  }
  BOOST_TEST(previous <= 1e-3);
}

BOOST_AUTO_TEST_CASE(jacobian_vector_products_match_finite_differences) {
  const Matrix<double> s = RandomMatrix<double>(8, 3, 6, 1.0);
  const Matrix<double> v = RandomMatrix<double>(8, 3, 7);
  const double h = 1e-6;
  for (double alpha : {1.0, 1.3, 1.5, 2.0, 2.5}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      const Matrix<double> p = Apply(s, alpha);
      Matrix<double> jv(8, 3);
      entmax::JacobianVectorProduct<double>(p, alpha, v, jv);
      const Matrix<double> fd = (Apply(s + h * v, alpha) - Apply(s - h * v, alpha)) / (2 * h);
      BOOST_TEST((jv - fd).norm() <= 1e-6 * (1 + fd.norm()));
      // Symmetric: <w, J v> = <J w, v>.
      const Matrix<double> w = RandomMatrix<double>(8, 3, 8);
      Matrix<double> jw(8, 3);
      entmax::JacobianVectorProduct<double>(p, alpha, w, jw);
      BOOST_TEST(std::abs((w.array() * jv.array()).sum() - (jw.array() * v.array()).sum()) <= 1e-12);
      // Aliasing out with v is allowed.
      Matrix<double> alias = v;
      entmax::JacobianVectorProduct<double>(p, alpha, alias, alias);
      BOOST_TEST((alias - jv).norm() <= 1e-14);
    }
  }
}

BOOST_AUTO_TEST_CASE(alpha_derivative_matches_finite_differences) {
  const Matrix<double> s = RandomMatrix<double>(8, 3, 9, 1.5);
  const double h = 1e-6;
  for (double alpha : {1.2, 1.5, 2.0, 2.7}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      const Matrix<double> p = Apply(s, alpha);
      Matrix<double> dp(8, 3);
      entmax::AlphaDerivative<double>(p, alpha, dp);
      Matrix<double> plus(8, 3), minus(8, 3);
      entmax::Bisect<double>(s, alpha + h, plus);
      entmax::Bisect<double>(s, alpha - h, minus);
      const Matrix<double> fd = (plus - minus) / (2 * h);
      BOOST_TEST((dp - fd).norm() <= 1e-6 * (1 + fd.norm()));
      BOOST_TEST(std::abs(dp.sum()) <= 1e-10);  // stays on the simplex
    }
  }
}

BOOST_AUTO_TEST_CASE(conjugate_is_the_value_of_the_max_and_its_gradient_is_p) {
  const Matrix<double> s = RandomMatrix<double>(6, 3, 10, 1.5);
  const double h = 1e-6;
  for (double alpha : {1.0, 1.5, 2.0, 1.8}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      const Matrix<double> p = Apply(s, alpha);
      Vector<double> conj(3), omega(3);
      entmax::Conjugate<double>(s, p, alpha, conj);
      entmax::Regularizer<double>(p, alpha, omega);
      for (Index b = 0; b < 3; ++b) {
        // Value of the max at its maximiser ...
        BOOST_TEST(std::abs(conj(b) - (p.col(b).dot(s.col(b)) - omega(b))) <= 1e-10);
        // ... and no other point of the simplex does better.
        for (unsigned trial = 0; trial < 20; ++trial) {
          Vector<double> q = RandomMatrix<double>(6, 1, 100 + trial).cwiseAbs();
          q /= q.sum();
          Vector<double> oq(1);
          entmax::Regularizer<double>(Matrix<double>(q), alpha, oq);
          BOOST_TEST(q.dot(s.col(b)) - oq(0) <= conj(b) + 1e-12);
        }
      }
      // Danskin: d Omega*/ds = p.
      for (Index i = 0; i < 6; ++i) {
        Matrix<double> sp = s, sm = s;
        sp.row(i).array() += h;
        sm.row(i).array() -= h;
        Vector<double> cp(3), cm(3);
        entmax::Conjugate<double>(sp, Apply(sp, alpha), alpha, cp);
        entmax::Conjugate<double>(sm, Apply(sm, alpha), alpha, cm);
        for (Index b = 0; b < 3; ++b) {
          BOOST_TEST(std::abs((cp(b) - cm(b)) / (2 * h) - p(i, b)) <= 1e-7);
        }
      }
    }
  }
}

// The one-pass weights and conjugate (support entries only for alpha 1.5 and
// 2) equal the two separate calls, also with masked entries, a column with
// every entry masked and a tie for the largest score; the closed forms may be
// computed in place.
BOOST_AUTO_TEST_CASE(weights_and_conjugate_in_one_pass_equal_the_two_calls) {
  Matrix<double> s = RandomMatrix<double>(40, 5, 16, 2.0);
  s(3, 0) = -kInf;
  s.col(1).setConstant(-kInf);
  s(7, 2) = s(8, 2) = s.col(2).maxCoeff() + 0.5;
  for (double alpha : {1.0, 1.5, 2.0, 1.7}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      const Matrix<double> p = Apply(s, alpha);
      Vector<double> conj(5);
      entmax::Conjugate<double>(s, p, alpha, conj);
      Matrix<double> q(40, 5);
      Vector<double> values(5);
      entmax::EntmaxAndConjugate<double>(s, alpha, q, values);
      BOOST_TEST((q - p).cwiseAbs().maxCoeff() <= 1e-14);
      BOOST_TEST(values(1) == -kInf);
      BOOST_TEST(conj(1) == -kInf);
      for (Index b : {0, 2, 3, 4}) BOOST_TEST(std::abs(values(b) - conj(b)) <= 1e-12 * (1 + std::abs(conj(b))));
      Matrix<double> in_place = s;
      entmax::Entmax<double>(in_place, alpha, in_place);
      BOOST_TEST((in_place - p).cwiseAbs().maxCoeff() <= 1e-14);
      Vector<double> wrong(4);
      BOOST_CHECK_THROW(entmax::EntmaxAndConjugate<double>(s, alpha, q, wrong), std::invalid_argument);
    }
  }
}

BOOST_AUTO_TEST_CASE(huge_scores_give_no_nan_and_shift_invariance_holds) {
  Matrix<double> s = RandomMatrix<double>(10, 3, 11, 1.0);
  const Matrix<double> big = s.array() + 1e8;
  Matrix<double> huge = 1e8 * s;
  for (double alpha : {1.0, 1.5, 2.0, 1.3}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      const Matrix<double> p = Apply(s, alpha), pb = Apply(big, alpha), ph = Apply(huge, alpha);
      BOOST_TEST(pb.allFinite());
      BOOST_TEST(ph.allFinite());
      BOOST_TEST((p - pb).cwiseAbs().maxCoeff() <= 1e-7);  // scores shifted by 1e8
      for (Index b = 0; b < 3; ++b) {
        BOOST_TEST(std::abs(ph.col(b).sum() - 1) <= 1e-12);
        Index arg;
        s.col(b).maxCoeff(&arg);
        BOOST_TEST(ph(arg, b) == 1.0);  // 1e8 scores: a one-hot argmax
      }
      Vector<double> conj(3), conj_big(3);
      entmax::Conjugate<double>(s, p, alpha, conj);
      entmax::Conjugate<double>(big, pb, alpha, conj_big);
      BOOST_TEST((conj_big.array() - 1e8 - conj.array()).abs().maxCoeff() <= 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(masked_entries_get_exactly_zero_weight) {
  Matrix<double> s = RandomMatrix<double>(6, 3, 12, 1.0);
  s(0, 0) = -kInf;
  s(3, 1) = -kInf;
  s.col(2).setConstant(-kInf);
  s(4, 2) = 0.3;  // a single unmasked entry gets all the weight
  for (double alpha : {1.0, 1.5, 2.0, 1.25}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      const Matrix<double> p = Apply(s, alpha);
      BOOST_TEST(p.allFinite());
      BOOST_TEST(p(0, 0) == 0.0);
      BOOST_TEST(p(3, 1) == 0.0);
      BOOST_TEST(p(4, 2) == 1.0);
      BOOST_TEST(p.col(2).sum() == 1.0);
      // The masked problem equals the problem on the unmasked entries only.
      Matrix<double> reduced(5, 1);
      reduced << s(1, 0), s(2, 0), s(3, 0), s(4, 0), s(5, 0);
      const Matrix<double> pr = Apply(reduced, alpha);
      BOOST_TEST((pr - p.col(0).tail(5)).norm() <= 1e-12);
      Vector<double> conj(3), conj_r(1);
      entmax::Conjugate<double>(s, p, alpha, conj);
      entmax::Conjugate<double>(reduced, pr, alpha, conj_r);
      BOOST_TEST(std::abs(conj(0) - conj_r(0)) <= 1e-12);
      BOOST_TEST(std::isfinite(conj(1)));
      Matrix<double> jv(6, 3);
      entmax::JacobianVectorProduct<double>(p, alpha, Matrix<double>::Ones(6, 3), jv);
      BOOST_TEST(jv(0, 0) == 0.0);
    }
  }
  // A column with every entry masked: zero weights, conjugate -inf.
  Matrix<double> all = Matrix<double>::Constant(4, 1, -kInf);
  const Matrix<double> p = Apply(all, 1.5);
  BOOST_TEST(p.norm() == 0.0);
  Vector<double> conj(1);
  entmax::Conjugate<double>(all, p, 1.5, conj);
  BOOST_TEST(conj(0) == -kInf);
}

BOOST_AUTO_TEST_CASE(float_precision_agrees_with_double) {
  const Matrix<double> s = RandomMatrix<double>(12, 4, 13, 2.0);
  const Matrix<float> sf = s.cast<float>();
  for (float alpha : {1.0f, 1.5f, 2.0f, 1.4f}) {
    BOOST_TEST_CONTEXT("alpha = " << alpha) {
      Matrix<float> pf(12, 4);
      entmax::Entmax<float>(sf, alpha, pf);
      const Matrix<double> p = Apply(s, alpha);
      BOOST_TEST((pf.cast<double>() - p).cwiseAbs().maxCoeff() <= 1e-5);
      Matrix<float> huge = sf * 1e8f;
      entmax::Entmax<float>(huge, alpha, pf);
      BOOST_TEST(pf.allFinite());
      Vector<float> conj(4);
      entmax::Conjugate<float>(huge, pf, alpha, conj);
      BOOST_TEST(conj.allFinite());
    }
  }
}

BOOST_AUTO_TEST_CASE(invalid_arguments_are_named) {
  Matrix<double> s = RandomMatrix<double>(4, 2, 14), p(4, 2), wrong(3, 2);
  BOOST_CHECK_THROW(entmax::Entmax<double>(s, 0.5, p), std::invalid_argument);
  BOOST_CHECK_THROW(entmax::Bisect<double>(s, 1.0, p), std::invalid_argument);
  BOOST_CHECK_THROW(entmax::AlphaDerivative<double>(s, 1.0, p), std::invalid_argument);
  try {
    entmax::Sparsemax<double>(s, wrong);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("Sparsemax(p)") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("3x2") != std::string::npos);
  }
  Matrix<double> empty(0, 2);
  BOOST_CHECK_THROW(entmax::Softmax<double>(empty, empty), std::invalid_argument);
}
