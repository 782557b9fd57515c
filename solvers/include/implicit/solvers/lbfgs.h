/// \file
/// L-BFGS on the energy behind an energy-based map, batched and guarded.
///
/// For maps built from an Energy (CccpMap, GradientStepMap, EnergyRootMap in
/// energy_maps.h) the residual r = f(z) - z is -a grad E (a = the map's step,
/// 1 for CCCP), so the equilibrium is a stationary point of E. Each sample runs
/// limited-memory BFGS on g = -r with its own curvature pairs
///
/// \verbatim
///   s = z_k+1 - z_k,   y = g_k+1 - g_k = r_k - r_k+1,
/// \endverbatim
///
/// and proposes q = -H g = H r by the two-loop recursion with H_0 = I (or,
/// with eigenvalue_scaling, (s^T y / y^T y) I of the newest pair). With
/// H_0 = I the first proposal is the map's own step: on a CCCP map, L-BFGS is
/// "CCCP-preconditioned" quasi-Newton. A pair with s^T y <= curvature_threshold
/// |s| |y| is not stored, so H stays positive definite and every proposal is a
/// descent direction: saddles of E are left, not solved for.
///
/// Steps are guarded like Anderson's and Broyden's (internal/guarded_step.h):
/// trial points z + (1 - tau) r + tau q must decrease E sufficiently (one
/// evaluation of f and E for the samples still searching per round), else the
/// safe step f(z) is taken and the memory cleared. The acceptance test falls
/// back to the residual when the decrease is below the rounding of E, so
/// tight tolerances (1e-10 in double) are reachable: there is no accuracy
/// floor from comparing energy values. Only active samples are evaluated
/// (maps that SupportsColumnSubsets()); no threads; the loop never allocates.
///
/// Summary accounting: `function_evaluations` counts batch evaluations of f
/// (each with E); `jacobian_products` is 0.
///
/// \code
///   implicit::CccpMap<double> map(energy);
///   implicit::LbfgsSolver<double>::Options options;
///   options.memory = 10;
///   implicit::Summary summary = implicit::LbfgsSolver<double>(options).Solve(map, z);
/// \endcode
///
/// Solve() throws std::invalid_argument("lbfgs needs an energy; this map has
/// none") for a map whose energy() is nullptr.
#pragma once

#include <implicit/solvers/internal/batch_evaluator.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/buffer_stash.h>
#include <implicit/solvers/internal/guarded_step.h>
#include <implicit/solvers/internal/low_rank.h>
#include <implicit/solvers/internal/sample_loop.h>
#include <implicit/solvers/solver.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

/// L-BFGS on the energy behind an energy-based map, per sample, with the
/// energy guard (see lbfgs.h).
template <typename Scalar>
class LbfgsSolver : public Solver<Scalar> {
 public:
  /// The options of LbfgsSolver: the shared SolverOptions, the guard's fields
  /// (sufficient_decrease, max_backtracks, backtrack_factor, residual_factor:
  /// internal/guarded_step.h) and L-BFGS's own below.
  struct Options : SolverOptions, internal::GuardOptions {
    /// Number of (s, y) correction pairs each sample keeps (the oldest is
    /// overwritten when full; default 10). >= 1.
    int memory = 10;
    /// H_0 = (s^T y / y^T y) I from the newest pair (Oren's scaling) instead of
    /// I. Helps energies whose curvature is far from 1; with I (the default,
    /// false) the first step of a CCCP map is exactly the CCCP step.
    bool eigenvalue_scaling = false;
    /// A pair is stored only when s^T y > curvature_threshold |s| |y|
    /// (positive curvature along s). In [0, 1).
    double curvature_threshold = 1e-8;
    // The guard (sufficient_decrease, max_backtracks, backtrack_factor,
    // residual_factor) is described in internal/guarded_step.h.

    /// Checks every field (the shared ones first); on failure names the field in *error.
    /// \return true when every field is in range.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error) || !GuardOptions::IsValid(error)) return false;
      auto fail = [error](const std::string& message) {
        if (error != nullptr) *error = message;
        return false;
      };
      if (memory < 1 || memory > kMaxSolverMemory)
        return fail("memory must be in 1.." + std::to_string(kMaxSolverMemory) + ", got " + std::to_string(memory));
      if (!(curvature_threshold >= 0.0 && curvature_threshold < 1.0))
        return fail("curvature_threshold must be in [0, 1), got " +
                    std::to_string(curvature_threshold));
      return true;
    }
  };

  /// A solver with the given options.
  /// \throws std::invalid_argument("lbfgs: invalid options: \<field\> ...")
  ///         when options.IsValid() fails.
  explicit LbfgsSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return "lbfgs"; }

  /// Runs L-BFGS on every column of z in place until each sample converges or stops.
  /// \param map a map built from an energy (CccpMap, GradientStepMap, EnergyRootMap).
  /// \param z n x B: the initial points on entry, the results on return.
  /// \return the per-sample outcome and the work done.
  /// \throws std::invalid_argument when map.energy() is nullptr, when the
  ///         energy's dimension differs from the map's, for an empty batch
  ///         or z of the wrong dimension.
  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override;

 private:
  /// Stores the pair (ds, dy) in sample b's ring when the curvature is
  /// positive enough.
  void StorePair(Index b, Index base, Eigen::Ref<const Vector<Scalar>> ds, Eigen::Ref<const Vector<Scalar>> dy,
                 Matrix<Scalar>* s_ring, Matrix<Scalar>* y_ring, Matrix<Scalar>* rho, std::vector<int>* count,
                 std::vector<int>* newest) const {
    const Index m = options_.memory;
    const Scalar sy = internal::VectorDot<Scalar>(ds, dy);
    const Scalar scale = std::sqrt(internal::VectorDot<Scalar>(ds, ds)) * std::sqrt(internal::VectorDot<Scalar>(dy, dy));
    if (!(sy > static_cast<Scalar>(options_.curvature_threshold) * scale) ||
        !std::isfinite(static_cast<double>(sy))) {
      return;  // not stored: H stays positive definite
    }
    const Index slot = base + ((*newest)[b] + 1) % m;
    internal::CopyVector<Scalar>(ds, s_ring->col(slot));
    internal::CopyVector<Scalar>(dy, y_ring->col(slot));
    (*rho)((slot - base), b) = Scalar(1) / sy;
    (*newest)[b] = static_cast<int>(slot - base);
    (*count)[b] = std::min<int>((*count)[b] + 1, static_cast<int>(m));
  }

  /// q.col(b) = H q.col(b) (two-loop recursion over sample b's k stored
  /// pairs; alpha: room for k numbers). Each step is a dot product and an
  /// update of q, the dispatched kernels of internal/low_rank.h.
  void TwoLoop(Index b, Index base, const Matrix<Scalar>& s_ring, const Matrix<Scalar>& y_ring,
               const Matrix<Scalar>& rho, int k, int newest, Scalar* alpha, Matrix<Scalar>* q_out) const {
    const Index m = options_.memory;
    auto q = q_out->col(b);
    for (int i = 0; i < k; ++i) {  // newest to oldest
      const Index j = (newest - i + m) % m;
      Scalar dot;
      internal::HistoryDots(s_ring, base + j, 1, q, &dot);
      alpha[i] = rho(j, b) * dot;
      const Scalar minus_alpha = -alpha[i];
      internal::AddHistoryCombination(y_ring, base + j, 1, &minus_alpha, q);
    }
    if (options_.eigenvalue_scaling) {
      const Scalar yy = internal::VectorDot<Scalar>(y_ring.col(base + newest), y_ring.col(base + newest));
      internal::Combine<Scalar>(q, {{Scalar(1) / (rho(newest, b) * yy), q}});
    }
    for (int i = k - 1; i >= 0; --i) {  // oldest to newest
      const Index j = (newest - i + m) % m;
      Scalar dot;
      internal::HistoryDots(y_ring, base + j, 1, q, &dot);
      const Scalar step = alpha[i] - rho(j, b) * dot;
      internal::AddHistoryCombination(s_ring, base + j, 1, &step, q);
    }
  }

  Options options_;
  mutable internal::BufferPool<Scalar> buffers_;  // batch-sized buffers and histories kept between solves
};

template <typename Scalar>
Summary LbfgsSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  const Energy<Scalar>* energy = map.energy();
  if (energy == nullptr) throw std::invalid_argument("lbfgs needs an energy; this map has none");
  if (energy->dimension() != map.dimension()) {
    throw std::invalid_argument("lbfgs: the map's energy has dimension " +
                                std::to_string(energy->dimension()) + " but the map has " +
                                std::to_string(map.dimension()));
  }
  internal::SolveBuffers<Scalar> buffers(buffers_);  // first: ends last
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z, /*keep_images=*/false, buffers.stash());
  const Index n = z.rows(), batch = z.cols(), m = options_.memory;
  internal::BatchEvaluator<Scalar> evaluator(map, batch, internal::UsesEnergy(options_, map), buffers.stash());
  internal::GuardedStepper<Scalar> stepper(options_, n, batch, Scalar(1), internal::TrialPath::kBlend,
                                           buffers.stash());

  // ---- all memory, allocated once (the batch-sized part kept between solves)
  Matrix<Scalar>& fz = buffers.Take(n, batch);
  Matrix<Scalar>& q = buffers.Take(n, batch);
  Matrix<Scalar>& z_prev = buffers.Take(n, batch);
  Matrix<Scalar>& r_prev = buffers.Take(n, batch);
  Vector<Scalar> e(batch);
  Vector<Scalar>* energies = evaluator.with_energy() ? &e : nullptr;
  Matrix<Scalar>& s = buffers.Take(n, m * batch);  // sample b: columns [b m, b m + m)
  Matrix<Scalar>& y = buffers.Take(n, m * batch);
  Matrix<Scalar> rho(m, batch);                      // 1 / s^T y per stored pair
  const internal::SampleLoop samples(n);              // the per-sample work, threaded
  Matrix<Scalar> alpha(m, samples.threads());         // the two-loop's coefficients, per thread
  Matrix<Scalar> pairs(n, 2 * samples.threads());     // a new pair (ds, dy), per thread
  std::vector<int> count(batch, 0), newest(batch, -1);
  std::vector<char> has_prev(batch, 0), proposal(batch, 0);

  evaluator.Evaluate(z, monitor.active_columns(), fz, energies, &monitor);
  while (monitor.Observe(z, fz, energies)) {
    samples.Run(monitor.active_columns(), [&](Index b, int thread) {
      const Index base = b * m;
      auto r = q.col(b);  // r = f(z) - z, then H r in place (q is the proposal)
      internal::Combine<Scalar>(r, {{1, fz.col(b)}, {-1, z.col(b)}});
      if (has_prev[b]) {
        auto ds = pairs.col(2 * thread), dy = pairs.col(2 * thread + 1);
        internal::Combine<Scalar>(ds, {{1, z.col(b)}, {-1, z_prev.col(b)}});
        internal::Combine<Scalar>(dy, {{1, r_prev.col(b)}, {-1, r}});
        StorePair(b, base, ds, dy, &s, &y, &rho, &count, &newest);
      }
      internal::CopyVector<Scalar>(z.col(b), z_prev.col(b));
      internal::CopyVector<Scalar>(r, r_prev.col(b));
      has_prev[b] = 1;
      proposal[b] = count[b] > 0 ? 1 : 0;
      if (proposal[b]) TwoLoop(b, base, s, y, rho, count[b], newest[b], alpha.col(thread).data(), &q);
    });
    stepper.Step(z, fz, energies, q, proposal, &evaluator, &monitor);
    for (Index b : monitor.active_columns()) {
      if (proposal[b] && !stepper.accelerated(b)) count[b] = 0, newest[b] = -1;  // fell back
    }
  }
  return monitor.Finish(z);
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(LbfgsSolver);

}  // namespace implicit
