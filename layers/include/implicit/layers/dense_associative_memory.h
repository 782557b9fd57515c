// Classical Hopfield networks and dense associative memories (Krotov &
// Hopfield): N stored patterns xi_mu (columns of X, n x N) and an interaction
// function F of the overlap xi_mu . x,
//
//   binary states s in {-1,+1}^n:      E(s) = - sum_mu F(xi_mu . s)
//   continuous states, kEuclidean:     E(x) = - sum_mu F(xi_mu . x) + 0.5 |x|^2
//   continuous states in the box, kBox: E(x) = - sum_mu F(xi_mu . x) + (1/T) sum_i phi(x_i),
//       x in (-1, 1)^n, phi(x) = (1+x)/2 log((1+x)/2) + (1-x)/2 log((1-x)/2)
//       (the entropy barrier of the classical continuous Hopfield network; T > 0)
//
// Interaction functions (Interaction):
//   Quadratic()               F(t) = t^2 / 2          classical Hopfield (Hebbian W = X X^T)
//   Polynomial(n)             F(t) = t^n / n          dense associative memory, degree n >= 2
//   RectifiedPolynomial(n)    F(t) = max(t, 0)^n / n
//   Exponential(beta)         F(t) = exp(beta t) / beta   (beta > 0)
// The 1/n and 1/beta factors make F' simple (t^{n-1}, exp(beta t)); they do not
// change the binary dynamics, which only use signs of energy differences.
//
// DenseAssociativeMemoryEnergy is the continuous energy (an Energy with
// closed-form gradient, Hessian-vector product and parameter VJP w.r.t.
// learnable patterns). Update rules (CccpUpdate), valid CCCP steps when F is
// convex (quadratic, even n, rectified, exponential):
//   kEuclidean: x <- X F'(X^T x)              (= x - grad E)
//   kBox:       x <- tanh(T X F'(X^T x))      (the continuous Hopfield update)
// Which domain fits: kEuclidean is bounded below only where F grows at most
// quadratically (quadratic F with |X|_2 < 1, or locally); for higher degrees and
// the exponential a stored pattern is a saddle of the kEuclidean energy, so use
// kBox (bounded below: F is continuous on the box), whose minima approach the
// +-1 patterns as T grows. For kBox, CccpMap's Jacobian products are those of
// the gradient step (I - hess E), not of the tanh update: fine for Picard /
// Anderson and for implicit differentiation (the fixed points are the same),
// use EnergyRootMap for Newton. CccpUpdateAndValue / GradientAndValue give E
// with the update from one product X^T x; no per-sample data, so
// SupportsSubsets() is true.
//
// RetrieveBinary runs the binary dynamics: each neuron i is set to the sign
// that gives the lower energy with the others held fixed,
//   s_i <- sign( sum_mu F(xi_mu,i + t_mu) - F(-xi_mu,i + t_mu) ),  t_mu = sum_{j != i} xi_mu,j s_j,
// asynchronously (one neuron at a time; never increases E, always reaches a
// fixed point) or synchronously (all neurons from the same state; may
// oscillate with period 2). For F quadratic this is the classical rule
// s_i <- sign(sum_{j != i} W_ij s_j) with W = X X^T (no self-coupling).
//
//   Matrix<double> X = ...;                      // n x N, +-1 patterns
//   Matrix<double> s = corrupted;                // n x B, +-1 probes
//   implicit::BinaryRetrievalOptions o;          // asynchronous, random order
//   auto summary = implicit::RetrieveBinary<double>(X, implicit::Interaction::Polynomial(3), s, o);
//   // s now holds the retrieved states; summary.converged[b] says whether
//   // sample b reached a fixed point.
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

enum class InteractionType { kQuadratic, kPolynomial, kRectifiedPolynomial, kExponential };

// The interaction function F of a dense associative memory (see above).
struct Interaction {
  InteractionType type = InteractionType::kQuadratic;
  // Degree n of the (rectified) polynomial, >= 2; 2 for kQuadratic.
  int degree = 2;
  // Rate of the exponential, > 0 (unused otherwise).
  double beta = 1.0;

  static Interaction Quadratic() { return Interaction(); }
  static Interaction Polynomial(int n) { return {InteractionType::kPolynomial, n, 1.0}; }
  static Interaction RectifiedPolynomial(int n) {
    return {InteractionType::kRectifiedPolynomial, n, 1.0};
  }
  static Interaction Exponential(double beta = 1.0) {
    return {InteractionType::kExponential, 2, beta};
  }

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
  // "quadratic", "polynomial(3)", "rectified_polynomial(3)", "exponential(1)".
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

  // F(t), F'(t), F''(t) entry-wise (any output may be nullptr).
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

namespace internal {

// The separable interaction energy shared by dense associative memories and
// RBM-effective energies:
//   E(x) = (q/2)|x|^2 - <bias, x> - sum_mu G_mu(w_mu . x)
// with eval(s, G*, G'*, G''*) evaluating G entry-wise (row mu = unit mu).
template <typename Scalar>
struct SeparableEnergy {
  Scalar q = Scalar(1);

  template <typename WT, typename Eval>
  void Value(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
             ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const {
    const Matrix<Scalar> s = W.transpose() * x;
    Matrix<Scalar> g;
    eval(s, &g, nullptr, nullptr);
    values = (Scalar(0.5) * q) * x.colwise().squaredNorm().transpose() -
             g.colwise().sum().transpose();
    if (bias != nullptr) values.noalias() -= x.transpose() * (*bias);
  }
  // *r = bias + W G'(W^T x) and values = E(x), from one product W^T x.
  template <typename WT, typename Eval>
  void RetrievalAndValue(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                         ConstMatrixRef<Scalar> x, Matrix<Scalar>* r,
                         VectorRef<Scalar> values) const {
    const Matrix<Scalar> s = W.transpose() * x;
    Matrix<Scalar> g, dg;
    eval(s, &g, &dg, nullptr);
    values = (Scalar(0.5) * q) * x.colwise().squaredNorm().transpose() -
             g.colwise().sum().transpose();
    if (bias != nullptr) values.noalias() -= x.transpose() * (*bias);
    r->noalias() = W * dg;
    if (bias != nullptr) r->colwise() += *bias;
  }
  // grad = q x - bias - W G'(W^T x);   *retrieval (optional) = bias + W G'(W^T x).
  template <typename WT, typename Eval>
  void Gradient(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const {
    Matrix<Scalar> r;
    Retrieval(W, bias, eval, x, &r);
    grad = q * x - r;
  }
  template <typename WT, typename Eval>
  void Retrieval(const WT& W, const Vector<Scalar>* bias, const Eval& eval,
                 ConstMatrixRef<Scalar> x, Matrix<Scalar>* r) const {
    const Matrix<Scalar> s = W.transpose() * x;
    Matrix<Scalar> dg;
    eval(s, nullptr, &dg, nullptr);
    r->noalias() = W * dg;
    if (bias != nullptr) r->colwise() += *bias;
  }
  // H v = q v - W (G''(s) .* W^T v).
  template <typename WT, typename Eval>
  void HessianVectorProduct(const WT& W, const Eval& eval, ConstMatrixRef<Scalar> x,
                            ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const {
    const Matrix<Scalar> s = W.transpose() * x;
    Matrix<Scalar> d2g;
    eval(s, nullptr, nullptr, &d2g);
    const Matrix<Scalar> wv = (d2g.array() * (W.transpose() * v).array()).matrix();
    out = q * v;
    out.noalias() -= W * wv;
  }
  // d/dW sum_b <grad E(x_b), u_b> = -(U G'(S)^T + X (G''(S) .* W^T U)^T).
  template <typename WT, typename Eval>
  Matrix<Scalar> WeightVjp(const WT& W, const Eval& eval, ConstMatrixRef<Scalar> x,
                           ConstMatrixRef<Scalar> u) const {
    const Matrix<Scalar> s = W.transpose() * x;
    Matrix<Scalar> dg, d2g;
    eval(s, nullptr, &dg, &d2g);
    const Matrix<Scalar> wu = (d2g.array() * (W.transpose() * u).array()).matrix();
    Matrix<Scalar> out = -(u * dg.transpose());
    out.noalias() -= x * wu.transpose();
    return out;
  }
};

template <typename Scalar>
void CheckNonEmpty(const char* who, const Matrix<Scalar>& m) {
  if (m.rows() == 0 || m.cols() == 0) {
    throw std::invalid_argument(std::string(who) + ": must be non-empty, got " +
                                std::to_string(m.rows()) + "x" + std::to_string(m.cols()));
  }
}

}  // namespace internal

// ---------------------------------------------------------------------------
// The state domain of a continuous dense associative memory (see above).
enum class StateDomain { kEuclidean, kBox };

// E(x) = -sum_mu F(xi_mu . x) + 0.5 |x|^2 (kEuclidean) or + (1/T) sum_i phi(x_i)
// (kBox), continuous states.
template <typename Scalar>
class DenseAssociativeMemoryEnergy : public Energy<Scalar> {
 public:
  struct Options {
    // The interaction function F.
    Interaction interaction;
    // kEuclidean (+ 0.5|x|^2) or kBox (entropy barrier on (-1, 1)^n).
    StateDomain domain = StateDomain::kEuclidean;
    // kBox only: the gain T > 0 of the update x <- tanh(T X F'(X^T x)).
    double box_gain = 1.0;
    // Trainable patterns: parameter block "X" (n x N). False: fixed data.
    bool learn_patterns = false;
    bool IsValid(std::string* error) const {
      if (!interaction.IsValid(error)) {
        if (error) *error = "interaction." + *error;
        return false;
      }
      if (!(box_gain > 0.0) || !std::isfinite(box_gain)) {
        if (error) *error = "box_gain must be finite and > 0, got " + std::to_string(box_gain);
        return false;
      }
      return true;
    }
  };

  // patterns: n x N. Throws on invalid options or empty patterns.
  DenseAssociativeMemoryEnergy(Matrix<Scalar> patterns, const Options& options)
      : options_(options) {
    std::string error;
    if (!options.IsValid(&error)) {
      throw std::invalid_argument("DenseAssociativeMemoryEnergy: " + error);
    }
    internal::CheckNonEmpty("DenseAssociativeMemoryEnergy(patterns)", patterns);
    n_ = patterns.rows();
    box_ = options.domain == StateDomain::kBox;
    kernel_.q = box_ ? Scalar(0) : Scalar(1);
    T_ = static_cast<Scalar>(options.box_gain);
    if (options.learn_patterns) {
      params_.Add("X", patterns.rows(), patterns.cols());
      params_.Block("X") = patterns;
    } else {
      X_ = std::move(patterns);
    }
  }

  const Options& options() const { return options_; }
  Index dimension() const override { return n_; }
  ConstMatrixRef<Scalar> patterns() const {
    if (options_.learn_patterns) return params_.Block("X");
    return X_;
  }

  // kBox: +inf outside [-1, 1]^n.
  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::Value(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::Value(values)", values, x.cols(), 1);
    kernel_.Value(patterns(), nullptr, Eval(), x, values);
    AddBarrier(x, values);
  }
  // kEuclidean: x - X F'(X^T x); kBox: atanh(x) / T - X F'(X^T x).
  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::Gradient(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::Gradient(grad)", grad, n_, x.cols());
    kernel_.Gradient(patterns(), nullptr, Eval(), x, grad);
    if (box_) grad += (x.array().atanh() / T_).matrix();
  }
  // kEuclidean: x <- X F'(X^T x); kBox: x <- tanh(T X F'(X^T x)).
  void CccpUpdate(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::CccpUpdate(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::CccpUpdate(out)", out, n_, x.cols());
    Matrix<Scalar> r;
    kernel_.Retrieval(patterns(), nullptr, Eval(), x, &r);
    if (box_) {
      out = (T_ * r.array()).tanh().matrix();
    } else {
      out = r;
    }
  }
  // The update and E from one product X^T x.
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::CccpUpdateAndValue(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::CccpUpdateAndValue(out)", out, n_, x.cols());
    internal::CheckShape("DenseAssociativeMemoryEnergy::CccpUpdateAndValue(values)", values,
                         x.cols(), 1);
    Matrix<Scalar> r;
    kernel_.RetrievalAndValue(patterns(), nullptr, Eval(), x, &r, values);
    AddBarrier(x, values);
    if (box_) {
      out = (T_ * r.array()).tanh().matrix();
    } else {
      out = r;
    }
  }
  // grad E and E from one product X^T x.
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::GradientAndValue(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::GradientAndValue(grad)", grad, n_, x.cols());
    internal::CheckShape("DenseAssociativeMemoryEnergy::GradientAndValue(values)", values,
                         x.cols(), 1);
    Matrix<Scalar> r;
    kernel_.RetrievalAndValue(patterns(), nullptr, Eval(), x, &r, values);
    AddBarrier(x, values);
    grad = kernel_.q * x - r;
    if (box_) grad += (x.array().atanh() / T_).matrix();
  }
  // No per-sample data: any subset of a batch's columns may be evaluated.
  bool SupportsSubsets() const override { return true; }
  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::HessianVectorProduct(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::HessianVectorProduct(v)", v, n_, x.cols());
    internal::CheckShape("DenseAssociativeMemoryEnergy::HessianVectorProduct(out)", out, n_, x.cols());
    kernel_.HessianVectorProduct(patterns(), Eval(), x, v, out);
    if (box_) out.array() += v.array() / (T_ * (Scalar(1) - x.array().square()));
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return params_.size() > 0 ? &params_ : nullptr; }
  const ParameterSet<Scalar>& parameter_set() const { return params_; }
  // d/dX sum_b <grad E(x_b), u_b> = -(U F'(S)^T + Xb (F''(S) .* X^T U)^T), S = X^T Xb.
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    internal::CheckBatch("DenseAssociativeMemoryEnergy::ParameterVectorJacobianProduct(x)", x, n_);
    internal::CheckShape("DenseAssociativeMemoryEnergy::ParameterVectorJacobianProduct(u)", u, n_,
                         x.cols());
    internal::CheckShape("DenseAssociativeMemoryEnergy::ParameterVectorJacobianProduct(out)", out,
                         num_parameters(), 1);
    if (!options_.learn_patterns) return;
    params_.BlockOf(out, "X") = kernel_.WeightVjp(patterns(), Eval(), x, u);
  }

 private:
  auto Eval() const {
    const Interaction f = options_.interaction;
    return [f](const Matrix<Scalar>& s, Matrix<Scalar>* g, Matrix<Scalar>* dg, Matrix<Scalar>* d2g) {
      f.Evaluate(s, g, dg, d2g);
    };
  }
  // kBox: values += (1/T) sum_i phi(x_i); nothing for kEuclidean.
  void AddBarrier(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const {
    if (!box_) return;
    for (Index b = 0; b < x.cols(); ++b) {
      Scalar sum(0);
      for (Index i = 0; i < n_; ++i) sum += Barrier(x(i, b));
      values(b) += sum / T_;
    }
  }
  // phi(x) = u log u + w log w, u = (1+x)/2, w = (1-x)/2; 0 log 0 = 0.
  static Scalar Barrier(Scalar x) {
    if (!(x >= Scalar(-1) && x <= Scalar(1))) return std::numeric_limits<Scalar>::infinity();
    const Scalar u = (Scalar(1) + x) / Scalar(2), w = (Scalar(1) - x) / Scalar(2);
    return (u > Scalar(0) ? u * std::log(u) : Scalar(0)) + (w > Scalar(0) ? w * std::log(w) : Scalar(0));
  }

  Options options_;
  Index n_ = 0;
  bool box_ = false;
  Scalar T_ = Scalar(1);
  Matrix<Scalar> X_;
  ParameterSet<Scalar> params_;
  internal::SeparableEnergy<Scalar> kernel_;
};

// ---------------------------------------------------------------------------
// Binary (+-1) dynamics.

struct BinaryRetrievalOptions {
  // false: asynchronous, one neuron at a time, each update seeing the previous
  // ones (never increases the energy). true: synchronous, all neurons updated
  // from the same state (may cycle with period 2).
  bool synchronous = false;
  // Maximum number of sweeps (one sweep = every neuron considered once) per sample.
  int max_sweeps = 100;
  // Asynchronous only: visit the neurons in a fresh random order each sweep
  // (seeded by `seed` and the sample index), else in index order.
  bool random_order = true;
  unsigned seed = 0;

  bool IsValid(std::string* error) const {
    if (max_sweeps < 1) {
      if (error) *error = "max_sweeps must be >= 1, got " + std::to_string(max_sweeps);
      return false;
    }
    return true;
  }
};

struct BinaryRetrievalSummary {
  // Per sample: reached a fixed point (a whole sweep without a flip).
  std::vector<char> converged;
  // Per sample: sweeps performed (including the final sweep without flips).
  std::vector<int> sweeps;
  // Per sample: total number of neuron flips.
  std::vector<long> flips;
  int num_converged() const {
    return static_cast<int>(std::count(converged.begin(), converged.end(), 1));
  }
};

namespace internal {

// Runs the binary dynamics on sigma (n x B, entries +-1 on entry; any nonzero
// value is read as its sign). W (n x N) holds the couplings in double; for
// neuron i of a sample with current overlaps s = W^T sigma (N), gain(i, s,
// sigma_i) returns G with E(sigma_i = -1) - E(sigma_i = +1) having the sign of
// G. sigma_i <- sign(G), unchanged when G == 0 or not finite.
template <typename Scalar, typename Gain>
BinaryRetrievalSummary RunBinaryDynamics(const Matrix<double>& W, MatrixRef<Scalar> sigma,
                                         const BinaryRetrievalOptions& options, const Gain& gain,
                                         const char* who) {
  std::string error;
  if (!options.IsValid(&error)) throw std::invalid_argument(std::string(who) + ": " + error);
  CheckBatch((std::string(who) + "(states)").c_str(), sigma, W.rows());
  const Index n = W.rows(), B = sigma.cols();
  BinaryRetrievalSummary summary;
  summary.converged.assign(B, 0);
  summary.sweeps.assign(B, 0);
  summary.flips.assign(B, 0);
  std::vector<Index> order(n);
  Vector<double> state(n), s(W.cols()), next(n);
  for (Index b = 0; b < B; ++b) {
    for (Index i = 0; i < n; ++i) state(i) = sigma(i, b) < Scalar(0) ? -1.0 : 1.0;
    s.noalias() = W.transpose() * state;
    std::mt19937 gen(options.seed + 7919u * static_cast<unsigned>(b));
    std::iota(order.begin(), order.end(), Index(0));
    for (int sweep = 1; sweep <= options.max_sweeps; ++sweep) {
      summary.sweeps[b] = sweep;
      long flips = 0;
      if (options.synchronous) {
        for (Index i = 0; i < n; ++i) {
          const double g = gain(i, s, state(i));
          next(i) = (g > 0) ? 1.0 : (g < 0) ? -1.0 : state(i);
          flips += next(i) != state(i);
        }
        state = next;
        s.noalias() = W.transpose() * state;
      } else {
        if (options.random_order) std::shuffle(order.begin(), order.end(), gen);
        for (Index k = 0; k < n; ++k) {
          const Index i = order[k];
          const double g = gain(i, s, state(i));
          const double v = (g > 0) ? 1.0 : (g < 0) ? -1.0 : state(i);
          if (v != state(i)) {
            s += (v - state(i)) * W.row(i).transpose();
            state(i) = v;
            ++flips;
          }
        }
      }
      summary.flips[b] += flips;
      if (flips == 0) {
        summary.converged[b] = 1;
        break;
      }
    }
    for (Index i = 0; i < n; ++i) sigma(i, b) = static_cast<Scalar>(state(i));
  }
  return summary;
}

// sign-preserving sum_mu F(t_mu + d_mu) - F(t_mu - d_mu), computed so that it
// neither overflows (exponential: max-shifted; polynomial: scaled by `scale`,
// an upper bound of |t| + |d|) nor loses the sign.
inline double InteractionFlipGain(const Interaction& f, const Vector<double>& t,
                                  const Vector<double>& d, double scale) {
  const Index N = t.size();
  double sum = 0.0;
  switch (f.type) {
    case InteractionType::kQuadratic:
      for (Index mu = 0; mu < N; ++mu) sum += 2.0 * t(mu) * d(mu);  // (t+d)^2/2 - (t-d)^2/2
      return sum;
    case InteractionType::kPolynomial:
    case InteractionType::kRectifiedPolynomial: {
      const bool rect = f.type == InteractionType::kRectifiedPolynomial;
      for (Index mu = 0; mu < N; ++mu) {
        double a = (t(mu) + d(mu)) / scale, c = (t(mu) - d(mu)) / scale;
        if (rect) {
          a = std::max(a, 0.0);
          c = std::max(c, 0.0);
        }
        sum += std::pow(a, f.degree) - std::pow(c, f.degree);
      }
      return sum;
    }
    case InteractionType::kExponential: {
      double m = -std::numeric_limits<double>::infinity();
      for (Index mu = 0; mu < N; ++mu) m = std::max(m, f.beta * (std::abs(d(mu)) + t(mu)));
      for (Index mu = 0; mu < N; ++mu) {
        sum += std::exp(f.beta * (t(mu) + d(mu)) - m) - std::exp(f.beta * (t(mu) - d(mu)) - m);
      }
      return sum;
    }
  }
  return sum;
}

}  // namespace internal

// Binary retrieval in a dense associative memory with patterns X (n x N) and
// interaction F: updates the +-1 states sigma (n x B) in place (see the top of
// this file). Throws std::invalid_argument on bad options or shapes.
template <typename Scalar>
BinaryRetrievalSummary RetrieveBinary(ConstMatrixRef<Scalar> patterns,
                                      const Interaction& interaction, MatrixRef<Scalar> sigma,
                                      const BinaryRetrievalOptions& options = BinaryRetrievalOptions()) {
  std::string error;
  if (!interaction.IsValid(&error)) throw std::invalid_argument("RetrieveBinary: interaction." + error);
  if (patterns.rows() == 0 || patterns.cols() == 0) {
    throw std::invalid_argument("RetrieveBinary(patterns): must be non-empty");
  }
  const Matrix<double> X = patterns.template cast<double>();
  const double scale = std::max(1.0, X.cwiseAbs().colwise().sum().maxCoeff());
  Vector<double> t(X.cols()), d(X.cols());
  auto gain = [&](Index i, const Vector<double>& s, double si) {
    d = X.row(i).transpose();
    t = s - si * d;
    return internal::InteractionFlipGain(interaction, t, d, scale);
  };
  return internal::RunBinaryDynamics<Scalar>(X, sigma, options, gain, "RetrieveBinary");
}

// values(b) = -sum_mu F(xi_mu . sigma_b), the binary energy (any states).
template <typename Scalar>
void BinaryEnergy(ConstMatrixRef<Scalar> patterns, const Interaction& interaction,
                  ConstMatrixRef<Scalar> sigma, VectorRef<Scalar> values) {
  internal::CheckBatch("BinaryEnergy(states)", sigma, patterns.rows());
  internal::CheckShape("BinaryEnergy(values)", values, sigma.cols(), 1);
  const Matrix<Scalar> s = patterns.transpose() * sigma;
  Matrix<Scalar> f;
  interaction.Evaluate<Scalar>(s, &f, nullptr, nullptr);
  values = -f.colwise().sum().transpose();
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(DenseAssociativeMemoryEnergy);

}  // namespace implicit
