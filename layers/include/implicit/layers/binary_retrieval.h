/// \file
/// Binary (+-1) retrieval in a classical Hopfield network or dense associative
/// memory (dense_associative_memory.h has the family). Patterns X (n x N), an
/// interaction function F (interaction_function.h) and the binary energy
/// E(s) = - sum_mu F(xi_mu . s), s in {-1,+1}^n (BinaryEnergy).
///
/// RetrieveBinary runs the binary dynamics: each neuron i is set to the sign
/// that gives the lower energy with the others held fixed,
/// \code{.unparsed}
///   s_i <- sign( sum_mu F(xi_mu,i + t_mu) - F(-xi_mu,i + t_mu) ),  t_mu = sum_{j != i} xi_mu,j s_j,
/// \endcode
/// asynchronously (one neuron at a time; never increases E, always reaches a
/// fixed point) or synchronously (all neurons from the same state; may
/// oscillate with period 2). For F quadratic this is the classical rule
/// s_i <- sign(sum_{j != i} W_ij s_j) with W = X X^T (no self-coupling).
///
/// \code
///   Matrix<double> X = ...;                      // n x N, +-1 patterns
///   Matrix<double> s = corrupted;                // n x B, +-1 probes
///   implicit::BinaryRetrievalOptions o;          // asynchronous, random order
///   auto summary = implicit::RetrieveBinary<double>(X, implicit::Interaction::Polynomial(3), s, o);
///   // s now holds the retrieved states; summary.converged[b] says whether
///   // sample b reached a fixed point.
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/interaction_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

// ---------------------------------------------------------------------------
// Binary (+-1) dynamics.

/// Options of RetrieveBinary: synchronous or asynchronous updates, sweep
/// limit and visiting order.
struct BinaryRetrievalOptions {
  /// false (the default): asynchronous, one neuron at a time, each update seeing the previous
  /// ones (never increases the energy). true: synchronous, all neurons updated
  /// from the same state (may cycle with period 2).
  bool synchronous = false;
  /// Maximum number of sweeps (one sweep = every neuron considered once) per
  /// sample (>= 1; default 100).
  int max_sweeps = 100;
  /// Asynchronous only: visit the neurons in a fresh random order each sweep
  /// (seeded by `seed` and the sample index; the default), else in index order.
  bool random_order = true;
  /// Seed of the random visiting order (combined with the sample index, so
  /// that every sample gets its own order); unused unless random_order.
  unsigned seed = 0;

  /// True when the options are usable (max_sweeps >= 1); otherwise false, with
  /// the reason written to *error when error is not nullptr.
  bool IsValid(std::string* error) const {
    if (max_sweeps < 1) {
      if (error) *error = "max_sweeps must be >= 1, got " + std::to_string(max_sweeps);
      return false;
    }
    return true;
  }
};

/// What RetrieveBinary did, per sample (one entry per column of the states).
struct BinaryRetrievalSummary {
  /// Per sample: reached a fixed point (a whole sweep without a flip).
  std::vector<char> converged;
  /// Per sample: sweeps performed (including the final sweep without flips).
  std::vector<int> sweeps;
  /// Per sample: total number of neuron flips.
  std::vector<long> flips;
  /// The number of samples that reached a fixed point.
  int num_converged() const {
    return static_cast<int>(std::count(converged.begin(), converged.end(), 1));
  }
};

namespace internal {

/// Runs the binary dynamics on sigma (n x B, entries +-1 on entry; any nonzero
/// value is read as its sign). W (n x N) holds the couplings in double; for
/// neuron i of a sample with current overlaps s = W^T sigma (N), gain(i, s,
/// sigma_i) returns G with E(sigma_i = -1) - E(sigma_i = +1) having the sign of
/// G. sigma_i <- sign(G), unchanged when G == 0 or not finite.
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

/// sign-preserving sum_mu F(t_mu + d_mu) - F(t_mu - d_mu), computed so that it
/// neither overflows (exponential: max-shifted; polynomial: scaled by `scale`,
/// an upper bound of |t| + |d|) nor loses the sign.
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

/// Binary retrieval in a dense associative memory with patterns X (n x N) and
/// interaction F: updates the +-1 states sigma (n x B) in place (see the top of
/// this file). Returns, per sample, whether it converged, the sweeps and the
/// flips.
/// \param patterns The stored patterns X, n x N, one pattern per column.
/// \param interaction The interaction function F.
/// \param sigma The states, n x B: +-1 probes on entry (any nonzero value is
///   read as its sign), the retrieved +-1 states on return.
/// \param options Synchronous or asynchronous updates, sweep limit, order.
/// \throws std::invalid_argument when the options or the interaction are
///   invalid, the patterns are empty, or sigma is not n x B with B >= 1.
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

/// Computes the binary energy of each state (column) of sigma (n x B; any
/// states, not only +-1) for the patterns X (n x N, one per column).
/// values(b) = -sum_mu F(xi_mu . sigma_b); values has length B.
/// \throws std::invalid_argument when sigma is not n x B with B >= 1 or values
///   does not have length B.
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

}  // namespace implicit
