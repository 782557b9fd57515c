// MSE, masked MSE and softmax cross-entropy: gradients agree with central
// finite differences, the losses are non-negative and vanish at the target,
// and bad shapes or labels are rejected.
#define BOOST_TEST_MODULE losses
#include <boost/test/unit_test.hpp>

#include <implicit/core/losses.h>

#include "support/test_problems.h"

#include <functional>

using implicit::Matrix;

namespace {

// Max abs difference between `grad` and the central-difference gradient of f.
double FdError(const std::function<double(const Matrix<double>&)>& f, Matrix<double> x,
               const Matrix<double>& grad) {
  double err = 0;
  for (implicit::Index i = 0; i < x.size(); ++i) {
    const double h = 1e-6, v = x(i);
    x(i) = v + h;
    const double fp = f(x);
    x(i) = v - h;
    const double fm = f(x);
    x(i) = v;
    err = std::max(err, std::abs((fp - fm) / (2 * h) - grad(i)));
  }
  return err;
}

}  // namespace

BOOST_AUTO_TEST_CASE(mse_gradient_matches_finite_differences) {
  Matrix<double> p = implicit::testing::RandomMatrix<double>(5, 3, 1);
  Matrix<double> t = implicit::testing::RandomMatrix<double>(5, 3, 2);
  Matrix<double> g;
  const double loss = implicit::MeanSquaredError<double>(p, t, &g);
  BOOST_TEST(loss > 0);
  BOOST_TEST(std::abs(loss - (p - t).squaredNorm() / 15) < 1e-14);
  auto f = [&](const Matrix<double>& x) { return implicit::MeanSquaredError<double>(x, t); };
  BOOST_TEST(FdError(f, p, g) < 1e-8);
  BOOST_TEST(implicit::MeanSquaredError<double>(t, t) == 0.0);
}

BOOST_AUTO_TEST_CASE(masked_mse_only_sees_masked_entries) {
  Matrix<double> p = implicit::testing::RandomMatrix<double>(6, 4, 3);
  Matrix<double> t = implicit::testing::RandomMatrix<double>(6, 4, 4);
  Matrix<double> mask = Matrix<double>::Zero(6, 4);
  mask.topRows(2).setOnes();
  Matrix<double> g;
  const double loss = implicit::MaskedMeanSquaredError<double>(p, t, mask, &g);
  BOOST_TEST(std::abs(loss - (p - t).topRows(2).squaredNorm() / 8) < 1e-14);
  BOOST_TEST(g.bottomRows(4).isZero(0));
  auto f = [&](const Matrix<double>& x) {
    return implicit::MaskedMeanSquaredError<double>(x, t, mask);
  };
  BOOST_TEST(FdError(f, p, g) < 1e-8);
  // Changing unmasked entries changes nothing.
  Matrix<double> p2 = p;
  p2.bottomRows(4).setConstant(100);
  BOOST_TEST(implicit::MaskedMeanSquaredError<double>(p2, t, mask) == loss);
  // An all-ones mask is the plain MSE; an all-zero mask gives 0.
  BOOST_TEST(std::abs(implicit::MaskedMeanSquaredError<double>(p, t, Matrix<double>::Ones(6, 4)) -
                      implicit::MeanSquaredError<double>(p, t)) < 1e-14);
  BOOST_TEST(implicit::MaskedMeanSquaredError<double>(p, t, Matrix<double>::Zero(6, 4), &g) == 0.0);
  BOOST_TEST(g.isZero(0));
  Matrix<double> bad = mask;
  bad(0, 0) = -1;
  BOOST_CHECK_THROW(implicit::MaskedMeanSquaredError<double>(p, t, bad), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::MaskedMeanSquaredError<double>(p, t, Matrix<double>::Ones(6, 3)),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(cross_entropy_gradient_matches_finite_differences) {
  Matrix<double> logits = implicit::testing::RandomMatrix<double>(4, 5, 5, 3.0);
  std::vector<int> labels = {0, 3, 1, 1, 2};
  Matrix<double> g;
  const double loss = implicit::SoftmaxCrossEntropy<double>(logits, labels, &g);
  BOOST_TEST(loss > 0);
  auto f = [&](const Matrix<double>& x) { return implicit::SoftmaxCrossEntropy<double>(x, labels); };
  BOOST_TEST(FdError(f, logits, g) < 1e-8);
  // Each column of the gradient sums to zero (softmax is shift invariant).
  BOOST_TEST(g.colwise().sum().cwiseAbs().maxCoeff() < 1e-14);
  // Huge logits stay finite.
  Matrix<double> big = logits * 1e4;
  BOOST_TEST(std::isfinite(implicit::SoftmaxCrossEntropy<double>(big, labels, &g)));
  BOOST_TEST(g.allFinite());
  // Soft targets: a one-hot target matrix gives the same loss and gradient.
  Matrix<double> onehot = Matrix<double>::Zero(4, 5);
  for (int b = 0; b < 5; ++b) onehot(labels[b], b) = 1;
  Matrix<double> g1, g2;
  const double l1 = implicit::SoftmaxCrossEntropy<double>(logits, labels, &g1);
  const double l2 = implicit::SoftmaxCrossEntropy<double>(logits, onehot, &g2);
  BOOST_TEST(std::abs(l1 - l2) < 1e-14);
  BOOST_TEST((g1 - g2).norm() < 1e-14);
  Matrix<double> soft = implicit::testing::RandomMatrix<double>(4, 5, 9).cwiseAbs();
  auto fs = [&](const Matrix<double>& x) { return implicit::SoftmaxCrossEntropy<double>(x, soft); };
  implicit::SoftmaxCrossEntropy<double>(logits, soft, &g2);
  BOOST_TEST(FdError(fs, logits, g2) < 1e-8);
}

BOOST_AUTO_TEST_CASE(cross_entropy_rejects_bad_labels) {
  Matrix<double> logits = Matrix<double>::Zero(3, 2);
  BOOST_CHECK_THROW(implicit::SoftmaxCrossEntropy<double>(logits, std::vector<int>{0, 3}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(implicit::SoftmaxCrossEntropy<double>(logits, std::vector<int>{0}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(implicit::SoftmaxCrossEntropy<double>(logits, std::vector<int>{-1, 0}),
                    std::invalid_argument);
  // Uniform logits: loss log K.
  BOOST_TEST(std::abs(implicit::SoftmaxCrossEntropy<double>(logits, std::vector<int>{0, 2}) -
                      std::log(3.0)) < 1e-14);
}
