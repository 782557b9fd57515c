/// \file
/// Hidden-unit priors of the RBM-effective energies (rbm.h), each given by its
/// cumulant generating function K_mu(t) = log E[exp(t h_mu)] with K' and K''
/// (CGFs are convex: K'' >= 0). Integrating out hidden unit mu of an RBM adds
/// -K_mu(w_mu . v) to the energy of the visible units.
/// \code{.unparsed}
///   GaussianPrior(m, s)  K(t) = m t + s^2 t^2 / 2   -> classical quadratic Hopfield
///   PoissonPrior(l)      K(t) = l (e^t - 1)          -> exponential dense memory
///   BernoulliPrior(p)    K(t) = log(1 - p + p e^t)   -> interactions of all orders
///   ConstantPrior(c)     K(t) = c t                  (h = c with certainty)
///   CustomPrior          any K with K', K'' given as callables of (t, mu)
/// \endcode
/// Scalars apply to every hidden unit; vectors give one value per unit.
///
/// \code
///   auto prior = std::make_shared<implicit::PoissonPrior<double>>(0.5);
///   implicit::Matrix<double> t = W.transpose() * v, k, dk;   // M x B
///   prior->Evaluate(t, &k, &dk, nullptr);                     // K(t), K'(t)
/// \endcode
#pragma once

#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

namespace implicit {

/// The cumulant generating function K_mu(t) = log E[exp(t h_mu)] of the prior of
/// hidden unit mu. Implement K, dK, d2K (scalar); Evaluate (row mu of t = unit
/// mu) loops over them by default, built-in priors vectorise it.
template <typename Scalar>
class HiddenPrior {
 public:
  virtual ~HiddenPrior() = default;
  /// A short name of the prior ("gaussian", "poisson", "bernoulli",
  /// "constant", or the CustomPrior's), for messages.
  virtual std::string name() const = 0;
  /// K_mu(t), the CGF of hidden unit mu at t. The built-in priors throw
  /// std::invalid_argument when they hold per-unit values and mu is not one of
  /// their units.
  virtual Scalar K(Scalar t, Index mu) const = 0;
  /// K_mu'(t), the first derivative of the CGF (the mean of h_mu under the
  /// prior tilted by t).
  virtual Scalar dK(Scalar t, Index mu) const = 0;
  /// K_mu''(t) >= 0, the second derivative of the CGF (the variance of h_mu
  /// under the tilted prior).
  virtual Scalar d2K(Scalar t, Index mu) const = 0;
  /// Entry-wise K, K', K'' of t (M x B); any output may be nullptr.
  virtual void Evaluate(const Matrix<Scalar>& t, Matrix<Scalar>* k, Matrix<Scalar>* dk,
                        Matrix<Scalar>* d2k) const;
  /// How many hidden units the prior has values for, or 0 when it applies to
  /// any number of units (one value for all; the default). RbmEnergy refuses
  /// couplings with more hidden units than a nonzero count.
  virtual Index units() const { return 0; }
};

template <typename Scalar>
void HiddenPrior<Scalar>::Evaluate(
    const Matrix<Scalar>& t,
    Matrix<Scalar>* k,
    Matrix<Scalar>* dk,
    Matrix<Scalar>* d2k) const {
  if (k) k->resize(t.rows(), t.cols());
  if (dk) dk->resize(t.rows(), t.cols());
  if (d2k) d2k->resize(t.rows(), t.cols());
  for (Index b = 0; b < t.cols(); ++b) {
    for (Index mu = 0; mu < t.rows(); ++mu) {
      if (k) (*k)(mu, b) = K(t(mu, b), mu);
      if (dk) (*dk)(mu, b) = dK(t(mu, b), mu);
      if (d2k) (*d2k)(mu, b) = d2K(t(mu, b), mu);
    }
  }
}

namespace internal {
/// The units per-unit parameters cover: 0 when each holds one value for every
/// unit, else the fewest values a per-unit one holds.
template <typename Scalar>
Index UnitsOf(std::initializer_list<const Vector<Scalar>*> values) {
  Index units = 0;
  for (const Vector<Scalar>* v : values) {
    if (v->size() != 1) units = units == 0 ? v->size() : std::min(units, v->size());
  }
  return units;
}
/// A per-unit parameter: one value for every unit, or one per unit.
template <typename Scalar>
Scalar PerUnit(const Vector<Scalar>& v, Index mu, const char* who) {
  if (v.size() == 1) return v(0);
  if (mu >= v.size()) {
    throw std::invalid_argument(std::string(who) + ": the prior has " + std::to_string(v.size()) +
                                " per-unit values but unit " + std::to_string(mu) + " was asked for");
  }
  return v(mu);
}
}  // namespace internal

/// Gaussian N(m, s^2): K(t) = m t + s^2 t^2 / 2. Scalars apply to every unit;
/// vectors give one value per hidden unit.
template <typename Scalar>
class GaussianPrior : public HiddenPrior<Scalar> {
 public:
  ///@{
  /// The prior N(mean, stddev^2): one mean and standard deviation for every
  /// hidden unit (scalars), or one per unit (vectors of length M).
  /// \throws std::invalid_argument when a vector is empty or holds a value that is not finite.
  explicit GaussianPrior(Scalar mean = Scalar(0), Scalar stddev = Scalar(1))
      : GaussianPrior(Vector<Scalar>::Constant(1, mean), Vector<Scalar>::Constant(1, stddev)) {}
  GaussianPrior(Vector<Scalar> mean, Vector<Scalar> stddev)
      : m_(std::move(mean)), s_(std::move(stddev)) {
    if (m_.size() == 0 || s_.size() == 0) throw std::invalid_argument("GaussianPrior: empty parameters");
    if (!m_.allFinite() || !s_.allFinite())
      throw std::invalid_argument("GaussianPrior: means and standard deviations must be finite");
  }
  ///@}
  std::string name() const override { return "gaussian"; }
  Scalar K(Scalar t, Index mu) const override {
    const Scalar s = internal::PerUnit(s_, mu, "GaussianPrior");
    return internal::PerUnit(m_, mu, "GaussianPrior") * t + Scalar(0.5) * s * s * t * t;
  }
  Scalar dK(Scalar t, Index mu) const override {
    const Scalar s = internal::PerUnit(s_, mu, "GaussianPrior");
    return internal::PerUnit(m_, mu, "GaussianPrior") + s * s * t;
  }
  Scalar d2K(Scalar, Index mu) const override {
    const Scalar s = internal::PerUnit(s_, mu, "GaussianPrior");
    return s * s;
  }

  Index units() const override { return internal::UnitsOf<Scalar>({&m_, &s_}); }

 private:
  Vector<Scalar> m_, s_;
};

/// Poisson(l): K(t) = l (e^t - 1).
template <typename Scalar>
class PoissonPrior : public HiddenPrior<Scalar> {
 public:
  ///@{
  /// The prior Poisson(rate): one rate for every hidden unit (scalar), or one
  /// per unit (vector of length M).
  /// \throws std::invalid_argument when the rates are empty, negative or not finite.
  explicit PoissonPrior(Scalar rate = Scalar(1)) : PoissonPrior(Vector<Scalar>::Constant(1, rate)) {}
  explicit PoissonPrior(Vector<Scalar> rate) : l_(std::move(rate)) {
    if (l_.size() == 0 || !l_.allFinite() || (l_.array() < Scalar(0)).any())
      throw std::invalid_argument("PoissonPrior: rates must be non-empty, finite and >= 0");
  }
  ///@}
  std::string name() const override { return "poisson"; }
  Scalar K(Scalar t, Index mu) const override {
    return internal::PerUnit(l_, mu, "PoissonPrior") * std::expm1(t);
  }
  Scalar dK(Scalar t, Index mu) const override {
    return internal::PerUnit(l_, mu, "PoissonPrior") * std::exp(t);
  }
  Scalar d2K(Scalar t, Index mu) const override { return dK(t, mu); }
  void Evaluate(const Matrix<Scalar>& t, Matrix<Scalar>* k, Matrix<Scalar>* dk,
                Matrix<Scalar>* d2k) const override;

  Index units() const override { return internal::UnitsOf<Scalar>({&l_}); }

 private:
  void ScaleRows(Matrix<Scalar>& m) const {
    for (Index mu = 0; mu < m.rows(); ++mu) m.row(mu) *= internal::PerUnit(l_, mu, "PoissonPrior");
  }
  Vector<Scalar> l_;
};

template <typename Scalar>
void PoissonPrior<Scalar>::Evaluate(
    const Matrix<Scalar>& t,
    Matrix<Scalar>* k,
    Matrix<Scalar>* dk,
    Matrix<Scalar>* d2k) const {
  Matrix<Scalar> e = t.array().exp().matrix();
  ScaleRows(e);
  if (k) {
    *k = t.array().unaryExpr([](Scalar x) { return Scalar(std::expm1(x)); }).matrix();
    ScaleRows(*k);
  }
  if (dk) *dk = e;
  if (d2k) *d2k = e;
}

/// Bernoulli(p) on {0, 1}: K(t) = log(1 - p + p e^t), K' = sigmoid(t + logit p),
/// K'' = K'(1 - K'). Computed without overflow for any t.
template <typename Scalar>
class BernoulliPrior : public HiddenPrior<Scalar> {
 public:
  ///@{
  /// The prior Bernoulli(p) on {0, 1}: one probability for every hidden unit
  /// (scalar), or one per unit (vector of length M).
  /// \throws std::invalid_argument when the probabilities are empty or not all
  ///   in (0, 1) (NaN included).
  explicit BernoulliPrior(Scalar p = Scalar(0.5)) : BernoulliPrior(Vector<Scalar>::Constant(1, p)) {}
  explicit BernoulliPrior(Vector<Scalar> p) : p_(std::move(p)) {
    if (p_.size() == 0 || !((p_.array() > Scalar(0)) && (p_.array() < Scalar(1))).all())
      throw std::invalid_argument("BernoulliPrior: probabilities must be in (0, 1)");
  }
  ///@}
  std::string name() const override { return "bernoulli"; }
  Scalar K(Scalar t, Index mu) const override {
    const Scalar p = internal::PerUnit(p_, mu, "BernoulliPrior");
    // (log1p(p expm1(t)) keeps its relative accuracy near t = 0 on both sides,
    // where K ~ p t; the other form avoids overflow)
    if (t > Scalar(30)) return t + std::log(p + (Scalar(1) - p) * std::exp(-t));
    return std::log1p(p * std::expm1(t));
  }
  Scalar dK(Scalar t, Index mu) const override {
    const Scalar p = internal::PerUnit(p_, mu, "BernoulliPrior");
    const Scalar z = t + std::log(p) - std::log1p(-p);
    return z >= Scalar(0) ? Scalar(1) / (Scalar(1) + std::exp(-z))
                          : std::exp(z) / (Scalar(1) + std::exp(z));
  }
  Scalar d2K(Scalar t, Index mu) const override {
    const Scalar s = dK(t, mu);
    return s * (Scalar(1) - s);
  }
  /// The same functions on whole matrices, vectorised (the RBM energy's
  /// entry-wise pass; the per-entry calls above cost several times its GEMMs).
  /// \throws std::invalid_argument when the prior holds per-unit values and t
  ///   has more rows than it has units.
  void Evaluate(const Matrix<Scalar>& t, Matrix<Scalar>* k, Matrix<Scalar>* dk,
                Matrix<Scalar>* d2k) const override;

  Index units() const override { return internal::UnitsOf<Scalar>({&p_}); }

 private:
  Vector<Scalar> p_;
};

template <typename Scalar>
void BernoulliPrior<Scalar>::Evaluate(
    const Matrix<Scalar>& t,
    Matrix<Scalar>* k,
    Matrix<Scalar>* dk,
    Matrix<Scalar>* d2k) const {
  // p per row of t (one value for every unit, or one per unit).
  const Index M = t.rows();
  if (p_.size() != 1 && p_.size() < M) {
    throw std::invalid_argument("BernoulliPrior: the prior has " + std::to_string(p_.size()) +
                                " per-unit values but " + std::to_string(M) + " units were asked for");
  }
  const Vector<Scalar> p = p_.size() == 1 ? Vector<Scalar>::Constant(M, p_(0)) : Vector<Scalar>(p_.head(M));
  // K(t) as K above, K' = sigmoid(t + logit p) and K'' = K'(1 - K') (0 or 1
  // in the limits, never NaN, accurate also where K' is near 1): one pass at
  // the CPU's vector level, one exponential per entry for all three (libm's
  // expm1 and log1p per entry took most of an rbm evaluation).
  if (k) k->resize(M, t.cols());
  if (dk) dk->resize(M, t.cols());
  if (d2k) d2k->resize(M, t.cols());
  if (k || dk || d2k) {
    internal::BernoulliColumnsKernel<Scalar>(t.data(), M, t.cols(), M, p.data(), k ? k->data() : nullptr, M,
                                             dk ? dk->data() : nullptr, M, d2k ? d2k->data() : nullptr, M);
  }
}

/// A hidden unit fixed at h = c: K(t) = c t (see the top of rbm.h).
template <typename Scalar>
class ConstantPrior : public HiddenPrior<Scalar> {
 public:
  ///@{
  /// The hidden value c: one for every hidden unit (scalar), or one per unit
  /// (vector of length M).
  /// \throws std::invalid_argument when the vector is empty or holds a value that is not finite.
  explicit ConstantPrior(Scalar c = Scalar(1)) : ConstantPrior(Vector<Scalar>::Constant(1, c)) {}
  explicit ConstantPrior(Vector<Scalar> c) : c_(std::move(c)) {
    if (c_.size() == 0) throw std::invalid_argument("ConstantPrior: empty values");
    if (!c_.allFinite()) throw std::invalid_argument("ConstantPrior: values must be finite");
  }
  ///@}
  std::string name() const override { return "constant"; }
  Scalar K(Scalar t, Index mu) const override { return internal::PerUnit(c_, mu, "ConstantPrior") * t; }
  Scalar dK(Scalar, Index mu) const override { return internal::PerUnit(c_, mu, "ConstantPrior"); }
  Scalar d2K(Scalar, Index) const override { return Scalar(0); }

  Index units() const override { return internal::UnitsOf<Scalar>({&c_}); }

 private:
  Vector<Scalar> c_;
};

/// A user-supplied CGF given as three callables of (t, mu).
template <typename Scalar>
class CustomPrior : public HiddenPrior<Scalar> {
 public:
  /// A scalar function of (t, mu): K, K' or K'' of hidden unit mu at t.
  using Function = std::function<Scalar(Scalar t, Index mu)>;
  /// The prior named name with the CGF k and its derivatives dk and d2k (d2k
  /// must be >= 0: CGFs are convex).
  /// \throws std::invalid_argument when k, dk or d2k is empty.
  CustomPrior(std::string name, Function k, Function dk, Function d2k)
      : name_(std::move(name)), k_(std::move(k)), dk_(std::move(dk)), d2k_(std::move(d2k)) {
    if (!k_ || !dk_ || !d2k_) throw std::invalid_argument("CustomPrior: K, dK and d2K are required");
  }
  std::string name() const override { return name_; }
  Scalar K(Scalar t, Index mu) const override { return k_(t, mu); }
  Scalar dK(Scalar t, Index mu) const override { return dk_(t, mu); }
  Scalar d2K(Scalar t, Index mu) const override { return d2k_(t, mu); }

 private:
  std::string name_;
  Function k_, dk_, d2k_;
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(GaussianPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(PoissonPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(BernoulliPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(ConstantPrior);
IMPLICIT_EXTERN_TEMPLATE_CLASS(CustomPrior);

}  // namespace implicit
