// implicit-et's held-out evaluation (et/evaluation.h).
#include "et/evaluation.h"

#include "et/model.h"

#include <implicit/layers/entmax.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

namespace implicit_apps {
namespace {

// One-step Hopfield completion: memories X (64 x N patch layout), visible
// pixels only in the scores.
Matrix<double> HopfieldComplete(const Matrix<double>& X, const Matrix<double>& queries,
                                const Matrix<double>& pixel_mask, double beta) {
  const Matrix<double> visible = ((1.0 - pixel_mask.array()) * queries.array()).matrix();
  Matrix<double> scores = beta * (X.transpose() * visible);
  Matrix<double> p(scores.rows(), scores.cols());
  implicit::entmax::Softmax<double>(scores, p);
  return X * p;
}

}  // namespace


Evaluation Evaluate(const Config& c, Workers& workers, const implicit::Communicator& comm, const Matrix<double>& train,
                    const Matrix<double>& test) {
  Evaluation e;
  std::mt19937 eval_gen(static_cast<unsigned>(c.seed) + 424242u);
  e.masks = RandomMasks(test.cols(), c.masked, eval_gen);
  e.pixel_mask = PixelMask(e.masks);
  e.pred = workers.Predict(c, test, e.masks, comm, &e.summary);
  e.et_mse = MaskedMse(e.pred, test, e.pixel_mask);
  Matrix<double> mean_fill = test;
  mean_fill.colwise() = Vector<double>(train.rowwise().mean());
  e.mean_mse = MaskedMse(mean_fill, test, e.pixel_mask);
  for (double beta : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    Matrix<double> h = HopfieldComplete(train, test, e.pixel_mask, beta);
    const double m = MaskedMse(h, test, e.pixel_mask);
    if (m < e.hop_mse) {
      e.hop_mse = m;
      e.best_beta = beta;
      e.hop_pred = std::move(h);
    }
  }
  // Paired over the held-out digits (same digits, same masks): per-digit masked
  // MSE of the ET minus that of Hopfield, its mean and standard error.
  const Vector<double> diff =
      ((e.pred - test).array().square() - (e.hop_pred - test).array().square())
          .cwiseProduct(e.pixel_mask.array())
          .colwise()
          .sum()
          .transpose()
          .cwiseQuotient(e.pixel_mask.colwise().sum().transpose().array())
          .matrix();
  const double n = static_cast<double>(diff.size());
  e.diff_mean = diff.mean();
  e.diff_stderr = std::sqrt((diff.array() - e.diff_mean).square().sum() / std::max(1.0, n - 1) / n);
  e.better = static_cast<long>((diff.array() < 0.0).count());
  return e;
}

}  // namespace implicit_apps
