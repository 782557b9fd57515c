/// \file
/// Jacobian regularisation: a Hutchinson estimate of |df/dz|_F^2 and its gradient.
///
/// Deep-equilibrium models stay stable and cheap to solve when the Jacobian
/// J = df/dz at the equilibrium is small; the standard stabiliser (Bai et al.,
/// "Stabilizing Equilibrium Models by Jacobian Regularization") adds
/// w |J|_F^2 / n to the loss. |J|_F^2 = E_e[|J^T e|^2] for probes e with
/// E[e e^T] = I (Rademacher or standard Gaussian), so each probe costs one
/// vector-Jacobian product.
///
/// \code
///   std::mt19937_64 rng(42);
///   implicit::JacobianRegularizationOptions options;   // 1 Rademacher probe
///   auto reg = implicit::EstimateJacobianFrobeniusNorm(map, z_star, rng, options);
///   loss += weight * reg.value;                        // sum over the batch
///   theta_gradient += weight * reg.parameter_gradient; // d value / d theta at fixed z
///   // Optional total derivative through z*(theta): add weight * reg.state_gradient
///   // to dL/dz* before ImplicitBackward (options.compute_state_gradient = true).
/// \endcode
///
/// Gradients. With v = J^T e held fixed, d|J^T e|^2 = 2 d(e^T J v), and e^T J v
/// is the directional derivative of <e, f(z; theta)> along v, so
///
/// \verbatim
///   d/dtheta |J^T e|^2 = 2 d/dt [ (df/dtheta)^T e at (z + t v) ]_{t=0}
///   d/dz     |J^T e|^2 = 2 d/dt [ (df/dz)^T e     at (z + t v) ]_{t=0}   (mixed partials commute)
///   d/dx     |J^T e|^2 = 2 d/dt [ (df/dx)^T e     at (z + t v) ]_{t=0}
/// \endverbatim
///
/// The FixedPointMap interface has first derivatives only, so these directional
/// derivatives (third derivatives of an energy, for energy maps) are taken by a
/// CENTRAL FINITE DIFFERENCE of the map's parameter / state / input VJP along v:
/// 2 extra VJPs per probe and gradient, whatever the number of parameters. The
/// step moves each sample by finite_difference_step * (1 + |z_b|_2); its error is
/// O(step^2) truncation + O(eps / step) rounding, about 1e-10 relative in double
/// with the default step cbrt(eps) (about 1e-4 in float). This works for every map
/// with the needed VJPs, energy maps (GradientStepMap / CccpMap over an Energy)
/// included; it is not exact to machine precision.
#pragma once

#include <implicit/core/map.h>
#include <implicit/core/types.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

namespace implicit {

/// The distribution of the entries of the Hutchinson probes e (E[e e^T] = I).
enum class ProbeDistribution {
  kRademacher,  ///< entries +-1 with probability 1/2 (lowest variance)
  kGaussian,    ///< entries standard normal
};

/// Options of EstimateJacobianFrobeniusNorm.
struct JacobianRegularizationOptions {
  /// Hutchinson probes per sample (the estimate averages them), >= 1; default 1.
  int num_probes = 1;
  /// Distribution of the probe entries (default Rademacher).
  ProbeDistribution distribution = ProbeDistribution::kRademacher;
  /// Compute d value / d theta (default true; needs map.ParameterVectorJacobianProduct;
  /// skipped, leaving the gradient empty, when map.num_parameters() == 0).
  bool compute_parameter_gradient = true;
  /// Compute d value / d z (n x B), for the total derivative through z* (default false).
  bool compute_state_gradient = false;
  /// Compute d value / d x (input_dimension() x B; skipped when the map has no
  /// input); default false.
  bool compute_input_gradient = false;
  /// Relative step of the finite differences along v; 0 (the default) = cbrt(machine epsilon).
  double finite_difference_step = 0.0;

  /// Checks every field; on failure names it in *error (when not null) and returns false.
  bool IsValid(std::string* error) const {
    auto fail = [error](const std::string& m) {
      if (error != nullptr) *error = m;
      return false;
    };
    if (num_probes < 1) return fail("num_probes must be >= 1, got " + std::to_string(num_probes));
    if (distribution != ProbeDistribution::kRademacher &&
        distribution != ProbeDistribution::kGaussian) {
      return fail("distribution is not a ProbeDistribution");
    }
    if (!(finite_difference_step >= 0.0) || !std::isfinite(finite_difference_step)) {
      return fail("finite_difference_step must be finite and >= 0, got " +
                  std::to_string(finite_difference_step));
    }
    return true;
  }
};

/// The result of EstimateJacobianFrobeniusNorm: the estimate of |df/dz|_F^2
/// and its requested gradients (empty when not requested).
template <typename Scalar>
struct JacobianRegularization {
  /// Per sample: the mean over probes of |J(z_b)^T e|^2, an unbiased estimate of |J(z_b)|_F^2.
  Vector<Scalar> sample_estimate;
  /// Sum over the batch of sample_estimate.
  Scalar value = Scalar(0);
  /// d value / d theta at fixed z (layout of map.parameters()), when requested.
  Vector<Scalar> parameter_gradient;
  /// d value / d z (n x B), when requested.
  Matrix<Scalar> state_gradient;
  /// d value / d x (input_dimension() x B), when requested.
  Matrix<Scalar> input_gradient;
};

/// Estimates |df/dz|_F^2 at every column of z (n x B) with fresh probes drawn
/// from rng, and the requested gradients of the estimate (same probes).
///
/// Needs map.HasJacobianProducts().
/// \throws std::invalid_argument on bad options or shapes, or when the map has
///   no vector-Jacobian products.
template <typename Scalar, typename Rng>
JacobianRegularization<Scalar> EstimateJacobianFrobeniusNorm(
    const FixedPointMap<Scalar>& map,
    ConstMatrixRef<typename internal::NonDeduced<Scalar>::type> z, Rng& rng,
    const JacobianRegularizationOptions& options = JacobianRegularizationOptions()) {
  std::string error;
  if (!options.IsValid(&error)) {
    throw std::invalid_argument("EstimateJacobianFrobeniusNorm: " + error);
  }
  const Index n = map.dimension();
  internal::CheckBatch("EstimateJacobianFrobeniusNorm: z", z, n);
  if (!map.HasJacobianProducts()) {
    throw std::invalid_argument(
        "EstimateJacobianFrobeniusNorm: the map has no vector-Jacobian products");
  }
  const Index batch = z.cols();
  const bool want_theta = options.compute_parameter_gradient && map.num_parameters() > 0;
  const bool want_x = options.compute_input_gradient && map.input_dimension() > 0;
  const bool want_z = options.compute_state_gradient;
  const double step = options.finite_difference_step > 0
                          ? options.finite_difference_step
                          : std::cbrt(static_cast<double>(std::numeric_limits<Scalar>::epsilon()));

  JacobianRegularization<Scalar> out;
  out.sample_estimate.setZero(batch);
  if (want_theta) out.parameter_gradient.setZero(map.num_parameters());
  if (want_z) out.state_gradient.setZero(n, batch);
  if (want_x) out.input_gradient.setZero(map.input_dimension(), batch);

  Matrix<Scalar> e(n, batch), v(n, batch), w(n, batch), zp(n, batch), zm(n, batch);
  Matrix<Scalar> gp, gm, xp, xm;
  Vector<Scalar> tp, tm;
  if (want_z) { gp.resize(n, batch); gm.resize(n, batch); }
  if (want_x) { xp.resize(map.input_dimension(), batch); xm.resize(map.input_dimension(), batch); }
  if (want_theta) { tp.resize(map.num_parameters()); tm.resize(map.num_parameters()); }
  std::uniform_int_distribution<int> coin(0, 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  const Scalar inv_probes = Scalar(1) / static_cast<Scalar>(options.num_probes);

  for (int k = 0; k < options.num_probes; ++k) {
    for (Index b = 0; b < batch; ++b) {
      for (Index i = 0; i < n; ++i) {
        e(i, b) = options.distribution == ProbeDistribution::kRademacher
                      ? Scalar(coin(rng) ? 1 : -1)
                      : static_cast<Scalar>(normal(rng));
      }
    }
    map.VectorJacobianProduct(z, e, v);
    out.sample_estimate += inv_probes * v.colwise().squaredNorm().transpose();
    if (!want_theta && !want_z && !want_x) continue;
    // Central difference along v with per-sample steps s_b: z +- s_b v_b, and
    // the probe scaled by 1/s_b so that the batch sums stay unweighted.
    for (Index b = 0; b < batch; ++b) {
      const Scalar vn = v.col(b).norm();
      const Scalar s = vn > Scalar(0)
                           ? static_cast<Scalar>(step) * (Scalar(1) + z.col(b).norm()) / vn
                           : Scalar(1);
      w.col(b) = s * v.col(b);
      e.col(b) /= s;
    }
    zp = z + w;
    zm = z - w;
    // d value = 2 (directional derivative) / probes; central difference / 2.
    const Scalar factor = inv_probes;  // 2 * (1/2) / probes
    if (want_theta) {
      map.ParameterVectorJacobianProduct(zp, e, tp);
      map.ParameterVectorJacobianProduct(zm, e, tm);
      out.parameter_gradient += factor * (tp - tm);
    }
    if (want_z) {
      map.VectorJacobianProduct(zp, e, gp);
      map.VectorJacobianProduct(zm, e, gm);
      out.state_gradient += factor * (gp - gm);
    }
    if (want_x) {
      map.InputVectorJacobianProduct(zp, e, xp);
      map.InputVectorJacobianProduct(zm, e, xm);
      out.input_gradient += factor * (xp - xm);
    }
  }
  out.value = out.sample_estimate.sum();
  return out;
}

}  // namespace implicit
