/// \file
/// LayerNorm with a scalar gain and bias, column by column: the one LayerNorm
/// of the library (ResidualLogNormalizerMap normalises each sample's column,
/// the Energy Transformer each token).
///
/// \code{.unparsed}
///   LN(y) = gamma yhat + delta,   yhat = (y - mean y) / s,   s = sqrt(var y + eps)
/// \endcode
///
/// (var: the population variance over the d entries of a column). LN is the
/// gradient of the Lagrangian L(y) = d gamma s + delta sum_i y_i, convex for
/// gamma > 0, so its Jacobian is symmetric (and positive semidefinite):
///
/// \code{.unparsed}
///   J = (gamma / s) (I - 1 1^T / d - yhat yhat^T / d)
/// \endcode
///
/// Products: JacobianProduct gives J v; JacobianDerivativeProduct gives
/// (d/dt J(y + t v))|_{t=0} r, the third derivative of L (Hessian-vector
/// products of energies built on LN). The *At forms take the yhat and s of
/// Normalize(), so several products at one y normalise it once.
///
/// \code
///   implicit::ColumnLayerNorm<double> ln;      // gamma 1, delta 0, epsilon 1e-5
///   implicit::Matrix<double> g(y.rows(), y.cols()), jv(y.rows(), y.cols());
///   ln.Apply(y, g);                             // g = LN(y), column by column
///   ln.JacobianProduct(y, v, jv);               // jv = J(y) v
/// \endcode
#pragma once

#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/types.h>

#include <cmath>
#include <type_traits>

namespace implicit {

/// LayerNorm with a scalar gain and bias, applied to each column of a batch:
/// LN(y) = gamma (y - mean y) / sqrt(var y + epsilon) + delta, with its
/// Jacobian products (the file comment has J).
template <typename Scalar>
class ColumnLayerNorm {
 public:
  /// The gain gamma (default 1; > 0 keeps LN monotone and J positive
  /// semidefinite).
  Scalar gamma = Scalar(1);
  /// The bias delta (default 0).
  Scalar delta = Scalar(0);
  /// The epsilon under the square root, s = sqrt(var y + epsilon) (default
  /// 1e-5).
  Scalar epsilon = Scalar(1e-5);

  /// yhat.col(b) = (y_b - mean y_b) / s(b), s(b) = sqrt(var y_b + epsilon).
  /// yhat has y's shape and may alias it; s has y.cols() entries.
  /// (float and double: internal::LayerNormColumnsKernel, at the CPU's level.)
  void Normalize(ConstMatrixRef<Scalar> y, MatrixRef<Scalar> yhat, VectorRef<Scalar> s) const {
    internal::CheckShape("ColumnLayerNorm::Normalize(yhat)", yhat, y.rows(), y.cols());
    internal::CheckShape("ColumnLayerNorm::Normalize(s)", s, y.cols(), 1);
    if constexpr (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) {
      internal::LayerNormColumnsKernel<Scalar>(y.data(), y.rows(), y.cols(), y.outerStride(), epsilon, yhat.data(),
                                               yhat.outerStride(), s.data());
    } else {
      const Scalar d = static_cast<Scalar>(y.rows());
      for (Index b = 0; b < y.cols(); ++b) {
        const Scalar mean = y.col(b).mean();
        yhat.col(b) = (y.col(b).array() - mean).matrix();
        s(b) = std::sqrt(yhat.col(b).squaredNorm() / d + epsilon);
        yhat.col(b) /= s(b);
      }
    }
  }

  /// out = LN(y). out may alias y.
  void Apply(ConstMatrixRef<Scalar> y, MatrixRef<Scalar> out) const {
    Vector<Scalar> s(y.cols());
    Normalize(y, out, s);
    out = (gamma * out.array() + delta).matrix();
  }

  /// out = J(y) v. out may alias v.
  void JacobianProduct(ConstMatrixRef<Scalar> y, ConstMatrixRef<Scalar> v,
                       MatrixRef<Scalar> out) const {
    Matrix<Scalar> yhat(y.rows(), y.cols());
    Vector<Scalar> s(y.cols());
    Normalize(y, yhat, s);
    JacobianProductAt(yhat, s, gamma, v, out);
  }

  /// out = J v at the point with Normalize() output (yhat, s), for the gain
  /// `gain` (J is linear in gamma; delta does not enter). out may alias v.
  static void JacobianProductAt(ConstMatrixRef<Scalar> yhat, ConstVectorRef<Scalar> s,
                                Scalar gain, ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) {
    const Scalar d = static_cast<Scalar>(yhat.rows());
    for (Index b = 0; b < yhat.cols(); ++b) {
      const Scalar vm = v.col(b).mean();
      const Scalar c = yhat.col(b).dot(v.col(b)) / d;
      out.col(b) = (gain / s(b)) * ((v.col(b).array() - vm).matrix() - c * yhat.col(b));
    }
  }

  /// out = (d/dt J(y + t v))|_{t=0} r at the point with Normalize() output
  /// (yhat, s), for the gain `gain`: with dyhat = (v - mean v - yhat (yhat.v)/d) / s,
  /// a = (yhat.v) / (d s) (= d log s) and c = yhat.r / d,
  /// \code{.unparsed}
  ///   out = (gain / s) (-a (r - mean r) + (a c - dyhat.r / d) yhat - c dyhat).
  /// \endcode
  static void JacobianDerivativeProductAt(ConstMatrixRef<Scalar> yhat, ConstVectorRef<Scalar> s,
                                          Scalar gain, ConstMatrixRef<Scalar> v,
                                          ConstMatrixRef<Scalar> r, MatrixRef<Scalar> out) {
    const Scalar d = static_cast<Scalar>(yhat.rows());
    Vector<Scalar> w(yhat.rows());
    for (Index b = 0; b < yhat.cols(); ++b) {
      const Scalar inv_s = Scalar(1) / s(b);
      const Scalar ds = yhat.col(b).dot(v.col(b)) / d;
      w = inv_s * ((v.col(b).array() - v.col(b).mean()).matrix() - ds * yhat.col(b));  // dyhat
      const Scalar c = yhat.col(b).dot(r.col(b)) / d;
      const Scalar wr = w.dot(r.col(b)) / d;
      const Scalar a = ds * inv_s;
      out.col(b) = gain * inv_s *
                   (-a * (r.col(b).array() - r.col(b).mean()).matrix() +
                    (a * c - wr) * yhat.col(b) - c * w);
    }
  }
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(ColumnLayerNorm);

}  // namespace implicit
