/// \file
/// Interaction: the interaction function F of a dense associative memory
/// (Krotov & Hopfield). It applies to the overlaps t = xi_mu . x of a state with
/// the stored patterns (dense_associative_memory.h has the family):
/// \code{.unparsed}
///   Quadratic()               F(t) = t^2 / 2          classical Hopfield (Hebbian W = X X^T)
///   Polynomial(n)             F(t) = t^n / n          dense associative memory, degree n >= 2
///   RectifiedPolynomial(n)    F(t) = max(t, 0)^n / n
///   Exponential(beta)         F(t) = exp(beta t) / beta   (beta > 0)
/// \endcode
/// The 1/n and 1/beta factors make F' simple (t^{n-1}, exp(beta t)); they do not
/// change the binary dynamics, which only use signs of energy differences.
///
/// \code
///   implicit::Interaction f = implicit::Interaction::Polynomial(3);
///   implicit::Matrix<double> F, dF;
///   f.Evaluate<double>(overlaps, &F, &dF, nullptr);   // F(t), F'(t) entry-wise
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <cmath>
#include <string>

namespace implicit {

/// The kind of an Interaction function F (see Interaction's factories).
enum class InteractionType { kQuadratic, kPolynomial, kRectifiedPolynomial, kExponential };

/// The interaction function F of a dense associative memory, applied
/// entry-wise to the overlaps of a state with the stored patterns.
/// interaction_function.h lists the four kinds.
struct Interaction {
  /// The kind of F; set it through the factories Quadratic(), Polynomial(),
  /// RectifiedPolynomial() and Exponential().
  InteractionType type = InteractionType::kQuadratic;
  /// Degree n of the (rectified) polynomial, >= 2; 2 for kQuadratic.
  int degree = 2;
  /// Rate of the exponential, > 0 (unused otherwise).
  double beta = 1.0;

  /// F(t) = t^2 / 2: the classical Hopfield network (Hebbian W = X X^T).
  static Interaction Quadratic() { return Interaction(); }
  /// F(t) = t^n / n: the dense associative memory of degree n (>= 2).
  static Interaction Polynomial(int n) { return {InteractionType::kPolynomial, n, 1.0}; }
  /// F(t) = max(t, 0)^n / n, of degree n (>= 2).
  static Interaction RectifiedPolynomial(int n) {
    return {InteractionType::kRectifiedPolynomial, n, 1.0};
  }
  /// F(t) = exp(beta t) / beta, with rate beta (> 0).
  static Interaction Exponential(double beta = 1.0) {
    return {InteractionType::kExponential, 2, beta};
  }

  /// True when the parameters are usable (degree >= 2 for the polynomials,
  /// beta finite and > 0 for the exponential); otherwise false, with the
  /// reason written to *error when error is not nullptr.
  bool IsValid(std::string* error) const {
    if ((type == InteractionType::kPolynomial || type == InteractionType::kRectifiedPolynomial) &&
        degree < 2) {
      if (error) *error = "degree must be >= 2, got " + std::to_string(degree);
      return false;
    }
    if (type == InteractionType::kExponential && (!(beta > 0.0) || !std::isfinite(beta))) {
      if (error) *error = "beta must be finite and > 0, got " + std::to_string(beta);
      return false;
    }
    return true;
  }
  /// The name of F: "quadratic", "polynomial(3)", "rectified_polynomial(3)",
  /// "exponential(1)".
  std::string ToString() const {
    std::ostringstream s;
    switch (type) {
      case InteractionType::kQuadratic: s << "quadratic"; break;
      case InteractionType::kPolynomial: s << "polynomial(" << degree << ")"; break;
      case InteractionType::kRectifiedPolynomial: s << "rectified_polynomial(" << degree << ")"; break;
      case InteractionType::kExponential: s << "exponential(" << beta << ")"; break;
    }
    return s.str();
  }

  /// F(t), F'(t), F''(t) entry-wise (any output may be nullptr).
  template <typename Scalar>
  void Evaluate(const Matrix<Scalar>& t, Matrix<Scalar>* f, Matrix<Scalar>* df,
                Matrix<Scalar>* d2f) const {
    const auto T = t.array();
    switch (type) {
      case InteractionType::kQuadratic:
        if (f) *f = (Scalar(0.5) * T.square()).matrix();
        if (df) *df = t;
        if (d2f) d2f->setOnes(t.rows(), t.cols());
        return;
      case InteractionType::kPolynomial:
      case InteractionType::kRectifiedPolynomial: {
        const Matrix<Scalar> P =
            type == InteractionType::kPolynomial ? t : Matrix<Scalar>(T.max(Scalar(0)).matrix());
        const Scalar n = static_cast<Scalar>(degree);
        if (f) *f = (P.array().pow(n) / n).matrix();
        if (df) *df = P.array().pow(n - Scalar(1)).matrix();
        if (d2f) {
          if (degree == 2) {
            *d2f = type == InteractionType::kPolynomial
                       ? Matrix<Scalar>::Ones(t.rows(), t.cols())
                       : Matrix<Scalar>((T > Scalar(0)).template cast<Scalar>());
          } else {
            *d2f = ((n - Scalar(1)) * P.array().pow(n - Scalar(2))).matrix();
          }
        }
        return;
      }
      case InteractionType::kExponential: {
        const Scalar b = static_cast<Scalar>(beta);
        const Matrix<Scalar> e = (b * T).exp().matrix();
        if (f) *f = e / b;
        if (df) *df = e;
        if (d2f) *d2f = b * e;
        return;
      }
    }
  }
};

}  // namespace implicit
