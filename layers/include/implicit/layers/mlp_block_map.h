/// \file
/// MlpBlockMap: the built-in explicit block f(z; x) = W2 act(W1 z + U x + b1) + b2
/// as a FixedPointMap with closed-form JVP / VJP and parameter / input VJPs, so
/// that its fixed point is an implicit layer (see deq_layer.h). The constructor
/// draws W1 and W2 with spectral norms sqrt(Options::init_lipschitz) each, so
/// the block starts as a contraction (LipschitzBound() = |W2|_2 |W1|_2 bounds
/// its Lipschitz constant in z).
///
/// \code
///   implicit::MlpBlockMap<double>::Options o;
///   o.state_dim = 16; o.hidden_dim = 32; o.input_dim = 8;
///   implicit::MlpBlockMap<double> block(o);
///   block.SetInput(x);                                   // 8 x B
///   implicit::PicardSolver<double>().Solve(block, z);    // z <- z*
/// \endcode
#pragma once

#include <implicit/core/activations.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/spectral_norm.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

/// Elementwise nonlinearity of MlpBlockMap; both are 1-Lipschitz.
enum class BlockActivation {
  kRelu,  ///< max(0, a); derivative 0 at a = 0
  kTanh,  ///< tanh(a)
};

/// The options of MlpBlockMap: sizes, activation and initialisation.
struct MlpBlockOptions {
  /// n: dimension of the state z (>= 1; must be set).
  Index state_dim = 0;
  /// h: width of the hidden layer (>= 1; must be set).
  Index hidden_dim = 0;
  /// p: dimension of the input injection x (0, the default: no input, no "U").
  Index input_dim = 0;
  /// The nonlinearity act (default kRelu).
  BlockActivation activation = BlockActivation::kRelu;
  /// Initial contraction bound |W2|_2 |W1|_2 (each drawn with spectral norm
  /// sqrt(init_lipschitz)); in (0, 1) for a contraction. U is drawn with
  /// entries N(0, 1/p), b1 and b2 start at 0. Default 0.5.
  double init_lipschitz = 0.5;
  /// Seed of the random initialisation (default 0).
  unsigned seed = 0;

  /// True when the options are usable (state_dim and hidden_dim >= 1,
  /// input_dim >= 0, init_lipschitz finite and > 0); otherwise false, with the
  /// reason written to *error when error is not nullptr.
  bool IsValid(std::string* error) const {
    auto fail = [&](const std::string& m) {
      if (error) *error = m;
      return false;
    };
    if (state_dim < 1) return fail("state_dim must be >= 1, got " + std::to_string(state_dim));
    if (hidden_dim < 1) return fail("hidden_dim must be >= 1, got " + std::to_string(hidden_dim));
    if (input_dim < 0) return fail("input_dim must be >= 0, got " + std::to_string(input_dim));
    if (!(init_lipschitz > 0.0) || !std::isfinite(init_lipschitz)) {
      return fail("init_lipschitz must be finite and > 0, got " + std::to_string(init_lipschitz));
    }
    return true;
  }
};

/// The built-in explicit block f(z; x) = W2 act(W1 z + U x + b1) + b2 as a
/// FixedPointMap with closed-form Jacobian products, so that its fixed point
/// z* = f(z*; x) is an implicit layer (deq_layer.h).
template <typename Scalar>
class MlpBlockMap : public FixedPointMap<Scalar> {
 public:
  /// The options (MlpBlockOptions).
  using Options = MlpBlockOptions;

  /// Builds the block with its parameters drawn from options.seed (see
  /// MlpBlockOptions::init_lipschitz). Parameters: "W1" (h x n), "U" (h x p,
  /// when input_dim > 0), "b1" (h x 1), "W2" (n x h), "b2" (n x 1).
  /// \throws std::invalid_argument when the options are invalid.
  explicit MlpBlockMap(const Options& options) : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) throw std::invalid_argument("MlpBlockMap::Options: " + error);
    const Index n = options.state_dim, h = options.hidden_dim, p = options.input_dim;
    params_.Add("W1", h, n);
    if (p > 0) params_.Add("U", h, p);
    params_.Add("b1", h, 1);
    params_.Add("W2", n, h);
    params_.Add("b2", n, 1);
    std::mt19937 gen(options.seed);
    std::normal_distribution<double> dist(0.0, 1.0);
    const double root = std::sqrt(options.init_lipschitz);
    for (const char* name : {"W1", "W2", "U"}) {
      if (!params_.Contains(name)) continue;
      auto block = params_.Block(name);
      Matrix<double> m(block.rows(), block.cols());
      for (Index j = 0; j < m.cols(); ++j)
        for (Index i = 0; i < m.rows(); ++i) m(i, j) = dist(gen);
      if (std::string(name) == "U") {
        m /= std::sqrt(static_cast<double>(p));
      } else {
        m *= root / SpectralNorm(m);
      }
      block = m.cast<Scalar>();
    }
  }

  /// The options the block was built with.
  const Options& options() const { return options_; }
  /// Sets the input injection x: input_dim x B (the batch the map will be
  /// evaluated on).
  /// \throws std::invalid_argument when x does not have input_dim rows.
  void SetInput(Matrix<Scalar> x);
  /// The input injection x of the last SetInput (input_dim x B).
  const Matrix<Scalar>& input() const { return x_; }
  /// |W2|_2 |W1|_2 >= Lip_z(f); below 1 means f is a contraction.
  double LipschitzBound() const {
    const Matrix<double> w1 = params_.Block("W1").template cast<double>();
    const Matrix<double> w2 = params_.Block("W2").template cast<double>();
    return SpectralNorm(w1) * SpectralNorm(w2);
  }

  Index dimension() const override { return options_.state_dim; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    internal::CheckShape("MlpBlockMap::Evaluate(out)", out, z.rows(), z.cols());
    Output(Preactivation(z, "MlpBlockMap::Evaluate(z)"), out);
  }
  /// Active set: the input x is per sample, so a block of samples is evaluated
  /// with their columns of x (EvaluateColumns); without an input any subset of
  /// the batch is a batch.
  bool SupportsSubsets() const override { return options_.input_dim == 0; }
  bool SupportsColumnSubsets() const override { return true; }
  void EvaluateColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                       MatrixRef<Scalar> out) const override;

  bool HasJacobianProducts() const override { return true; }
  /// J v = W2 diag(act'(a)) W1 v
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override;
  /// The Jacobian products of a block of samples, with their columns of x.
  bool SupportsColumnJacobianProducts() const override { return true; }
  void JacobianVectorProductColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                                    ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override;
  /// J^T u = W1^T diag(act'(a)) W2^T u
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    internal::CheckShape("MlpBlockMap::VectorJacobianProduct(u)", u, z.rows(), z.cols());
    internal::CheckShape("MlpBlockMap::VectorJacobianProduct(out)", out, z.rows(), z.cols());
    const Matrix<Scalar> du = HiddenAdjoint(z, u, "MlpBlockMap::VectorJacobianProduct(z)");
    out.noalias() = params_.Block("W1").transpose() * du;
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override;
  Index input_dimension() const override { return options_.input_dim; }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override;

 private:
  /// a = W1 z + U x + b1 with x = the input (SetInput), or its columns `x`.
  Matrix<Scalar> Preactivation(ConstMatrixRef<Scalar> z, const char* what) const {
    return Preactivation(z, x_, what);
  }
  Matrix<Scalar> Preactivation(ConstMatrixRef<Scalar> z, const Matrix<Scalar>& x,
                               const char* what) const;
  /// out = W2 act(a) + b2
  void Output(Matrix<Scalar> a, MatrixRef<Scalar> out) const {
    Activate(&a);
    out.noalias() = params_.Block("W2") * a;
    out.colwise() += Vector<Scalar>(params_.Block("b2"));
  }
  void Activate(Matrix<Scalar>* a) const {
    if (options_.activation == BlockActivation::kRelu) {
      *a = a->cwiseMax(Scalar(0));
    } else {
      Tanh<Scalar>(*a, *a);
    }
  }
  void ActivationDerivative(Matrix<Scalar>* a) const {
    if (options_.activation == BlockActivation::kRelu) {
      *a = (a->array() > Scalar(0)).template cast<Scalar>().matrix();
    } else {
      Tanh<Scalar>(*a, *a);
      *a = (Scalar(1) - a->array().square()).matrix();
    }
  }
  Matrix<Scalar> Derivative(ConstMatrixRef<Scalar> z, const char* what) const {
    Matrix<Scalar> d = Preactivation(z, what);
    ActivationDerivative(&d);
    return d;
  }
  /// out = W2 diag(d) W1 v, d = act'(a) of the samples.
  void ApplyJacobian(const Matrix<Scalar>& d, ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
    Matrix<Scalar> w = params_.Block("W1") * v;
    w.array() *= d.array();
    out.noalias() = params_.Block("W2") * w;
  }
  /// The input columns of a block of samples (checked), into *x.
  void GatherInput(const char* what, const std::vector<Index>& columns, Index count, Matrix<Scalar>* x) const {
    internal::CheckColumns(what, columns, count, x_.cols());
    internal::GatherColumns(x_, columns, x);
  }
  /// diag(act'(a)) W2^T u
  Matrix<Scalar> HiddenAdjoint(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                               const char* what) const {
    const Matrix<Scalar> d = Derivative(z, what);
    Matrix<Scalar> du = params_.Block("W2").transpose() * u;
    du.array() *= d.array();
    return du;
  }

  Options options_;
  ParameterSet<Scalar> params_;
  Matrix<Scalar> x_;
};

template <typename Scalar>
void MlpBlockMap<Scalar>::SetInput(Matrix<Scalar> x) {
  if (x.rows() != options_.input_dim) {
    std::ostringstream s;
    s << "MlpBlockMap::SetInput(x): expected " << options_.input_dim << " rows, got "
      << x.rows() << "x" << x.cols();
    throw std::invalid_argument(s.str());
  }
  x_ = std::move(x);
}

template <typename Scalar>
void MlpBlockMap<Scalar>::JacobianVectorProduct(
    ConstMatrixRef<Scalar> z,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  internal::CheckShape("MlpBlockMap::JacobianVectorProduct(v)", v, z.rows(), z.cols());
  internal::CheckShape("MlpBlockMap::JacobianVectorProduct(out)", out, z.rows(), z.cols());
  ApplyJacobian(Derivative(z, "MlpBlockMap::JacobianVectorProduct(z)"), v, out);
}

template <typename Scalar>
void MlpBlockMap<Scalar>::JacobianVectorProductColumns(
    ConstMatrixRef<Scalar> z,
    const std::vector<Index>& columns,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  if (options_.input_dim == 0) {
    FixedPointMap<Scalar>::JacobianVectorProductColumns(z, columns, v, out);
    return;
  }
  internal::CheckShape("MlpBlockMap::JacobianVectorProductColumns(v)", v, z.rows(), z.cols());
  internal::CheckShape("MlpBlockMap::JacobianVectorProductColumns(out)", out, z.rows(), z.cols());
  Matrix<Scalar> x;
  GatherInput("MlpBlockMap::JacobianVectorProductColumns", columns, z.cols(), &x);
  Matrix<Scalar> d = Preactivation(z, x, "MlpBlockMap::JacobianVectorProductColumns(z)");
  ActivationDerivative(&d);
  ApplyJacobian(d, v, out);
}

template <typename Scalar>
void MlpBlockMap<Scalar>::ParameterVectorJacobianProduct(
    ConstMatrixRef<Scalar> z,
    ConstMatrixRef<Scalar> u,
    VectorRef<Scalar> out) const {
  internal::CheckShape("MlpBlockMap::ParameterVectorJacobianProduct(u)", u, z.rows(), z.cols());
  internal::CheckShape("MlpBlockMap::ParameterVectorJacobianProduct(out)", out, num_parameters(), 1);
  Matrix<Scalar> a = Preactivation(z, "MlpBlockMap::ParameterVectorJacobianProduct(z)");
  Matrix<Scalar> d = a;
  Activate(&a);
  ActivationDerivative(&d);
  Matrix<Scalar> du = params_.Block("W2").transpose() * u;
  du.array() *= d.array();
  Vector<Scalar> flat(num_parameters());
  params_.BlockOf(flat, "W1").noalias() = du * z.transpose();
  if (options_.input_dim > 0) params_.BlockOf(flat, "U").noalias() = du * x_.transpose();
  params_.BlockOf(flat, "b1") = du.rowwise().sum();
  params_.BlockOf(flat, "W2").noalias() = u * a.transpose();
  params_.BlockOf(flat, "b2") = u.rowwise().sum();
  out = flat;
}

template <typename Scalar>
void MlpBlockMap<Scalar>::InputVectorJacobianProduct(
    ConstMatrixRef<Scalar> z,
    ConstMatrixRef<Scalar> u,
    MatrixRef<Scalar> out) const {
  internal::CheckShape("MlpBlockMap::InputVectorJacobianProduct(u)", u, z.rows(), z.cols());
  internal::CheckShape("MlpBlockMap::InputVectorJacobianProduct(out)", out, options_.input_dim,
                       z.cols());
  if (options_.input_dim == 0) return;
  const Matrix<Scalar> du = HiddenAdjoint(z, u, "MlpBlockMap::InputVectorJacobianProduct(z)");
  out.noalias() = params_.Block("U").transpose() * du;
}

template <typename Scalar>
void MlpBlockMap<Scalar>::EvaluateColumns(
    ConstMatrixRef<Scalar> z,
    const std::vector<Index>& columns,
    MatrixRef<Scalar> out) const {
  internal::CheckShape("MlpBlockMap::EvaluateColumns(out)", out, z.rows(), z.cols());
  if (options_.input_dim == 0) {
    FixedPointMap<Scalar>::EvaluateColumns(z, columns, out);
    return;
  }
  Matrix<Scalar> x;
  GatherInput("MlpBlockMap::EvaluateColumns", columns, z.cols(), &x);
  Output(Preactivation(z, x, "MlpBlockMap::EvaluateColumns(z)"), out);
}

template <typename Scalar>
Matrix<Scalar> MlpBlockMap<Scalar>::Preactivation(
    ConstMatrixRef<Scalar> z,
    const Matrix<Scalar>& x,
    const char* what) const {
  internal::CheckBatch(what, z, options_.state_dim);
  Matrix<Scalar> a = params_.Block("W1") * z;
  if (options_.input_dim > 0) {
    internal::CheckShape("MlpBlockMap input (SetInput)", x, options_.input_dim, z.cols());
    a.noalias() += params_.Block("U") * x;
  }
  a.colwise() += Vector<Scalar>(params_.Block("b1"));
  return a;
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(MlpBlockMap);

}  // namespace implicit
