// deq-tanh: z = tanh(W z + U x + b) with |W|_2 = --spectral-norm, x = digits.
#include "problems/registry.h"

#include "common/format.h"

#include <implicit/core/activations.h>
#include <implicit/core/gemm.h>
#include <implicit/core/spectral_norm.h>

#include <Eigen/Dense>

#include <memory>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

// z = tanh(W z + U x + b): an explicit map (no energy), contraction when
// |W|_2 < 1 since |tanh'| <= 1.
template <typename S>
class TanhDeqMapT : public implicit::FixedPointMap<S> {
 public:
  TanhDeqMapT(Matrix<S> W, Matrix<S> U, Vector<S> b, Matrix<S> x) : W_(std::move(W)), b_(std::move(b)) {
    injection_ = U * x;
    injection_.colwise() += b_;
  }
  Index dimension() const override { return W_.rows(); }
  void Evaluate(implicit::ConstMatrixRef<S> z, implicit::MatrixRef<S> out) const override {
    implicit::GemmInto<S>(out, W_, false, z);
    out += injection_;
    implicit::Tanh<S>(out, out);
  }
  // The injection U x + b is per sample: a block of samples uses its columns.
  bool SupportsColumnSubsets() const override { return true; }
  void EvaluateColumns(implicit::ConstMatrixRef<S> z, const std::vector<Index>& columns,
                       implicit::MatrixRef<S> out) const override {
    implicit::GemmInto<S>(out, W_, false, z);
    for (Index j = 0; j < z.cols(); ++j) out.col(j) += injection_.col(columns[j]);
    implicit::Tanh<S>(out, out);
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(implicit::ConstMatrixRef<S> z, implicit::ConstMatrixRef<S> v,
                             implicit::MatrixRef<S> out) const override {
    Linearize(z)->JacobianVectorProduct(v, out);
  }
  bool SupportsColumnJacobianProducts() const override { return true; }
  void JacobianVectorProductColumns(implicit::ConstMatrixRef<S> z, const std::vector<Index>& columns,
                                    implicit::ConstMatrixRef<S> v, implicit::MatrixRef<S> out) const override {
    Matrix<S> f(z.rows(), z.cols());
    EvaluateColumns(z, columns, f);
    Jacobian(W_, f).JacobianVectorProduct(v, out);
  }
  void VectorJacobianProduct(implicit::ConstMatrixRef<S> z, implicit::ConstMatrixRef<S> u,
                             implicit::MatrixRef<S> out) const override {
    Linearize(z)->VectorJacobianProduct(u, out);
  }
  // The Jacobian diag(1 - f^2) W at z keeps 1 - f^2: each product at z is then
  // one GEMM (f is not evaluated again for every product of a Krylov solve).
  std::unique_ptr<implicit::Linearization<S>> Linearize(implicit::ConstMatrixRef<S> z) const override {
    Matrix<S> f(z.rows(), z.cols());
    Evaluate(z, f);
    return std::make_unique<Jacobian>(W_, f);
  }
  // Newton-Krylov has f(z): 1 - f^2 without evaluating f again.
  std::unique_ptr<implicit::Linearization<S>> LinearizeWithValue(implicit::ConstMatrixRef<S> z,
                                                                  implicit::ConstMatrixRef<S> fz) const override {
    (void)z;
    return std::make_unique<Jacobian>(W_, fz);
  }
  const Matrix<S>& weights() const { return W_; }

 private:
  class Jacobian final : public implicit::Linearization<S> {
   public:
    // At the points whose map values are f: tanh' = 1 - f^2.
    Jacobian(const Matrix<S>& W, implicit::ConstMatrixRef<S> f) : W_(W), slope_(S(1) - f.array().square()) {}
    void JacobianVectorProduct(implicit::ConstMatrixRef<S> v, implicit::MatrixRef<S> out) const override {
      implicit::GemmInto<S>(out, W_, false, v);
      out.array() *= slope_.array();
    }
    void VectorJacobianProduct(implicit::ConstMatrixRef<S> u, implicit::MatrixRef<S> out) const override {
      const Matrix<S> du = (slope_.array() * u.array()).matrix();
      implicit::GemmInto<S>(out, W_, /*transpose_a=*/true, du);
    }

   private:
    const Matrix<S>& W_;
    const Matrix<S> slope_;
  };

  Matrix<S> W_;
  Vector<S> b_;
  Matrix<S> injection_;
};

template <typename S>
class DeqTanhProblemT : public ProblemT<S> {
 public:
  DeqTanhProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s) : map_(Build(digits, s)) {
    this->initial_ = Matrix<S>::Zero(kHidden, s.patterns);
    norm_ = s.Parameter("spectral-norm");
  }
  std::string name() const override { return "deq-tanh"; }
  std::string description() const override {
    return "z = tanh(W z + U x + b), " + std::to_string(kHidden) + " units, |W|_2 = " + Fmt(norm_) +
           ", x = " + std::to_string(this->initial_.cols()) + " digits";
  }
  const implicit::FixedPointMap<S>& map() const override { return *map_; }
  FloorTiming MeasureFloor(int repeats) const override {
    const Matrix<S>& W = map_->weights();
    const Index B = this->initial_.cols();
    const Matrix<S> z = Matrix<S>::Constant(kHidden, B, S(0.5));
    Matrix<S> out(kHidden, B);
    return TimeFloor("W Z (" + Shape(kHidden, kHidden) + " * " + Shape(kHidden, B) + ")",
                     "the one GEMM of z <- tanh(W z + U x + b) on all B samples (U x + b is computed "
                     "once, at construction); the tanh and the solver's vector work are extra",
                     2.0 * double(kHidden) * double(kHidden) * double(B), repeats, [&] {
                       implicit::GemmInto<S>(out, W, false, z);
                       return static_cast<double>(out(0, 0));
                     });
  }

 private:
  static constexpr Index kHidden = 128;
  static std::unique_ptr<TanhDeqMapT<S>> Build(const implicit::DigitsDataset& digits,
                                               const ProblemSettings& s) {
    std::mt19937 gen(s.seed);
    Matrix<double> W = RandomGaussian(kHidden, kHidden, 1.0, gen);
    W *= s.Parameter("spectral-norm") / implicit::SpectralNorm(W);
    Matrix<double> U = RandomGaussian(kHidden, 64, 1.0 / 8.0, gen);
    Vector<double> b = RandomGaussian(kHidden, 1, 0.1, gen);
    Matrix<double> x = digits.Scaled().leftCols(s.patterns);
    return std::make_unique<TanhDeqMapT<S>>(W.template cast<S>(), U.template cast<S>(),
                                            b.template cast<S>(), x.template cast<S>());
  }
  std::unique_ptr<TanhDeqMapT<S>> map_;
  double norm_ = 0.9;
};

const bool kDeqTanhRegistered = RegisterProblem<DeqTanhProblemT>([] {
  ProblemInfo p;
  p.name = "deq-tanh";
  p.order = 40;
  p.summary = "z = tanh(W z + U x + b) with |W|_2 = --spectral-norm";
  p.floor = "W Z";
  p.bench_patterns = 500;
  p.parameters = {{"spectral-norm", 0.9, "|W|_2 of deq-tanh, < 1 for a contraction", "in (0, 1e6]",
                   [](double v) { return v > 0 && v <= 1e6; }}};
  return p;
}());

}  // namespace
}  // namespace implicit_apps
