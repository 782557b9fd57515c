/// \file
/// ExplicitBlockMap: a user's explicit block z <- f(z; x, theta), written once as
/// a functor templated on the scalar type, as a FixedPointMap whose every
/// product is exact (forward-mode dual numbers, ceres::Jet, like
/// AutoDiffEnergy). The functor's form and costs are described in deq_layer.h.
///
/// \code
///   implicit::ExplicitBlockMap<TanhBlock, double> map(TanhBlock{n, p}, n, p, params);
///   map.SetInput(x);                                     // p x B
///   implicit::AndersonSolver<double>().Solve(map, z);    // z <- z*
/// \endcode
#pragma once

#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <ceres/jet.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

/// A user's explicit block as a FixedPointMap with exact derivatives (deq_layer.h
/// describes the functor's form). The functor must write every entry of
/// *out (already sized n) and must not depend on other samples.
template <typename Functor, typename Scalar, int kChunk = 8>
class ExplicitBlockMap : public FixedPointMap<Scalar> {
  static_assert(kChunk >= 1, "ExplicitBlockMap: kChunk must be at least 1");

 public:
  using Dual1 = ceres::Jet<Scalar, 1>;       ///< The dual number of one direction (JVP).
  using DualK = ceres::Jet<Scalar, kChunk>;  ///< The dual number of kChunk directions (VJPs).

  /// Wraps the functor as a map of the state z (dimension n) with an input
  /// injection of input_dimension rows (0: none) and the parameters theta
  /// (their values are passed to the functor; empty when nothing is learned).
  /// \throws std::invalid_argument when dimension < 1 or input_dimension < 0.
  ExplicitBlockMap(Functor functor, Index dimension, Index input_dimension = 0,
                   ParameterSet<Scalar> parameters = ParameterSet<Scalar>())
      : functor_(std::move(functor)),
        n_(dimension),
        p_(input_dimension),
        params_(std::move(parameters)) {
    if (dimension < 1) {
      throw std::invalid_argument("ExplicitBlockMap: dimension must be >= 1, got " +
                                  std::to_string(dimension));
    }
    if (input_dimension < 0) {
      throw std::invalid_argument("ExplicitBlockMap: input_dimension must be >= 0, got " +
                                  std::to_string(input_dimension));
    }
  }

  /// The wrapped functor.
  const Functor& functor() const { return functor_; }
  /// Sets the input injection x: input_dimension x B.
  /// \throws std::invalid_argument when x does not have input_dimension rows.
  void SetInput(Matrix<Scalar> x) {
    if (x.rows() != p_) {
      std::ostringstream s;
      s << "ExplicitBlockMap::SetInput(x): expected " << p_ << " rows, got " << x.rows() << "x"
        << x.cols();
      throw std::invalid_argument(s.str());
    }
    x_ = std::move(x);
  }
  /// The input injection x of the last SetInput (input_dimension x B).
  const Matrix<Scalar>& input() const { return x_; }

  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    Check("ExplicitBlockMap::Evaluate", z);
    internal::CheckShape("ExplicitBlockMap::Evaluate(out)", out, z.rows(), z.cols());
    Vector<Scalar> zb(n_), xb(p_), fb(n_);
    for (Index b = 0; b < z.cols(); ++b) {
      zb = z.col(b);
      if (p_ > 0) xb = x_.col(b);
      functor_(zb, xb, params_.values(), &fb);
      out.col(b) = fb;
    }
  }

  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    Check("ExplicitBlockMap::JacobianVectorProduct", z);
    internal::CheckShape("ExplicitBlockMap::JacobianVectorProduct(v)", v, z.rows(), z.cols());
    internal::CheckShape("ExplicitBlockMap::JacobianVectorProduct(out)", out, z.rows(), z.cols());
    const Vector<Dual1> theta = Lift<Dual1>(params_.values());
    Vector<Dual1> zd(n_), xd(p_), fd(n_);
    for (Index b = 0; b < z.cols(); ++b) {
      for (Index i = 0; i < n_; ++i) {
        zd(i) = Dual1(z(i, b));
        zd(i).v[0] = v(i, b);
      }
      if (p_ > 0) xd = Lift<Dual1>(x_.col(b));
      functor_(zd, xd, theta, &fd);
      for (Index i = 0; i < n_; ++i) out(i, b) = fd(i).v[0];
    }
  }
  /// out.col(b) = J_b^T u_b, column block by column block of J (forward mode).
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    Check("ExplicitBlockMap::VectorJacobianProduct", z);
    internal::CheckShape("ExplicitBlockMap::VectorJacobianProduct(u)", u, z.rows(), z.cols());
    internal::CheckShape("ExplicitBlockMap::VectorJacobianProduct(out)", out, z.rows(), z.cols());
    const Vector<DualK> theta = Lift<DualK>(params_.values());
    Vector<DualK> xd(p_), fd(n_);
    for (Index b = 0; b < z.cols(); ++b) {
      Vector<DualK> zd = Lift<DualK>(z.col(b));
      if (p_ > 0) xd = Lift<DualK>(x_.col(b));
      ForEachChunk(n_, [&](Index c, Index len) {
        for (Index k = 0; k < len; ++k) zd(c + k).v[k] = Scalar(1);
        functor_(zd, xd, theta, &fd);
        for (Index k = 0; k < len; ++k) {
          Scalar acc(0);
          for (Index i = 0; i < n_; ++i) acc += u(i, b) * fd(i).v[k];
          out(c + k, b) = acc;
          zd(c + k).v[k] = Scalar(0);
        }
      });
    }
  }

  /// The Jacobian at z as one dense n x n matrix per sample, made with the
  /// forward-mode sweeps of one VectorJacobianProduct: each product at z is
  /// then a matrix-vector product instead of ceil(n / kChunk) functor calls per
  /// sample (a backward solve makes tens). When the matrices would hold more
  /// than kMaxLinearizationEntries numbers, the default (products at a copy of z).
  std::unique_ptr<Linearization<Scalar>> Linearize(ConstMatrixRef<Scalar> z) const override {
    Check("ExplicitBlockMap::Linearize", z);
    if (n_ * n_ * z.cols() > kMaxLinearizationEntries) return FixedPointMap<Scalar>::Linearize(z);
    auto jacobian = std::make_unique<DenseJacobians>(n_, z.cols());
    const Vector<DualK> theta = Lift<DualK>(params_.values());
    Vector<DualK> xd(p_), fd(n_);
    for (Index b = 0; b < z.cols(); ++b) {
      Vector<DualK> zd = Lift<DualK>(z.col(b));
      if (p_ > 0) xd = Lift<DualK>(x_.col(b));
      auto J = jacobian->of(b);
      ForEachChunk(n_, [&](Index c, Index len) {
        for (Index k = 0; k < len; ++k) zd(c + k).v[k] = Scalar(1);
        functor_(zd, xd, theta, &fd);
        for (Index k = 0; k < len; ++k) {
          for (Index i = 0; i < n_; ++i) J(i, c + k) = fd(i).v[k];
          zd(c + k).v[k] = Scalar(0);
        }
      });
    }
    return jacobian;
  }
  /// The most numbers (n * n * B) Linearize keeps as dense Jacobians: 2^25
  /// (256 MiB in double).
  static constexpr Index kMaxLinearizationEntries = Index(1) << 25;

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return &params_; }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    Check("ExplicitBlockMap::ParameterVectorJacobianProduct", z);
    internal::CheckShape("ExplicitBlockMap::ParameterVectorJacobianProduct(u)", u, z.rows(), z.cols());
    internal::CheckShape("ExplicitBlockMap::ParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    out.setZero();
    Vector<DualK> theta = Lift<DualK>(params_.values());
    Vector<DualK> xd(p_), fd(n_);
    for (Index b = 0; b < z.cols(); ++b) {
      const Vector<DualK> zd = Lift<DualK>(z.col(b));
      if (p_ > 0) xd = Lift<DualK>(x_.col(b));
      ForEachChunk(num_parameters(), [&](Index c, Index len) {
        for (Index k = 0; k < len; ++k) theta(c + k).v[k] = Scalar(1);
        functor_(zd, xd, theta, &fd);
        for (Index k = 0; k < len; ++k) {
          Scalar acc(0);
          for (Index i = 0; i < n_; ++i) acc += u(i, b) * fd(i).v[k];
          out(c + k) += acc;
          theta(c + k).v[k] = Scalar(0);
        }
      });
    }
  }
  Index input_dimension() const override { return p_; }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override {
    Check("ExplicitBlockMap::InputVectorJacobianProduct", z);
    internal::CheckShape("ExplicitBlockMap::InputVectorJacobianProduct(u)", u, z.rows(), z.cols());
    internal::CheckShape("ExplicitBlockMap::InputVectorJacobianProduct(out)", out, p_, z.cols());
    const Vector<DualK> theta = Lift<DualK>(params_.values());
    Vector<DualK> fd(n_);
    for (Index b = 0; b < z.cols(); ++b) {
      const Vector<DualK> zd = Lift<DualK>(z.col(b));
      Vector<DualK> xd = Lift<DualK>(x_.col(b));
      ForEachChunk(p_, [&](Index c, Index len) {
        for (Index k = 0; k < len; ++k) xd(c + k).v[k] = Scalar(1);
        functor_(zd, xd, theta, &fd);
        for (Index k = 0; k < len; ++k) {
          Scalar acc(0);
          for (Index i = 0; i < n_; ++i) acc += u(i, b) * fd(i).v[k];
          out(c + k, b) = acc;
          xd(c + k).v[k] = Scalar(0);
        }
      });
    }
  }

 private:
  void Check(const char* function, ConstMatrixRef<Scalar> z) const {
    internal::CheckBatch((std::string(function) + "(z)").c_str(), z, n_);
    if (p_ > 0) {
      internal::CheckShape((std::string(function) + ": input (SetInput)").c_str(), x_, p_, z.cols());
    }
  }
  template <typename F>
  static void ForEachChunk(Index n, F&& f) {
    for (Index c = 0; c < n; c += kChunk) f(c, std::min<Index>(kChunk, n - c));
  }
  template <typename D, typename Derived>
  static Vector<D> Lift(const Eigen::MatrixBase<Derived>& values) {
    Vector<D> out(values.size());
    for (Index i = 0; i < values.size(); ++i) out(i) = D(values(i));
    return out;
  }

  // The n x n Jacobians of B samples, side by side.
  class DenseJacobians final : public Linearization<Scalar> {
   public:
    DenseJacobians(Index n, Index batch) : n_(n), jacobians_(n, n * batch) {}
    auto of(Index b) { return jacobians_.middleCols(b * n_, n_); }
    void JacobianVectorProduct(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
      internal::CheckShape("ExplicitBlockMap linearization: v", v, n_, jacobians_.cols() / n_);
      internal::CheckShape("ExplicitBlockMap linearization: out", out, v.rows(), v.cols());
      for (Index b = 0; b < v.cols(); ++b) out.col(b).noalias() = jacobians_.middleCols(b * n_, n_) * v.col(b);
    }
    void VectorJacobianProduct(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
      internal::CheckShape("ExplicitBlockMap linearization: u", u, n_, jacobians_.cols() / n_);
      internal::CheckShape("ExplicitBlockMap linearization: out", out, u.rows(), u.cols());
      for (Index b = 0; b < u.cols(); ++b) {
        out.col(b).noalias() = jacobians_.middleCols(b * n_, n_).transpose() * u.col(b);
      }
    }

   private:
    Index n_;
    Matrix<Scalar> jacobians_;
  };

  Functor functor_;
  Index n_, p_;
  ParameterSet<Scalar> params_;
  Matrix<Scalar> x_;
};

}  // namespace implicit
