// Anderson acceleration (type II, "Anderson mixing") for z = f(z).
//
// Each sample keeps its own short history of the last `memory` differences of
// iterates dZ = [z_i+1 - z_i] and of residuals dG = [g_i+1 - g_i], with
// g(z) = f(z) - z, and solves its own small regularised least-squares problem
//
//   gamma = argmin_gamma |g_k - dG gamma|^2 + lambda |gamma|^2
//   z_k+1 = z_k + beta g_k - (dZ + beta dG) gamma          (beta = mixing)
//
// (with an empty history this is the damped Picard step z + beta g). One
// evaluation of f per iteration; memory 2 n m B scalars plus an m x m Gram
// matrix per sample, all allocated before the loop (the loop never touches the
// heap). For a linear map Anderson with full memory reproduces GMRES, so it
// usually needs far fewer iterations than Picard on slowly contracting maps.
//
// Safeguards (each one a per-sample restart = the sample's history is cleared):
//  * relative ridge: lambda = ridge * trace(dG^T dG) / k scales with the
//    history, so it keeps regularising as residuals shrink (an absolute ridge
//    would dominate dG^T dG near convergence and stall the method);
//  * ill-conditioned history: restart when a Cholesky pivot of the k x k
//    system falls to condition_limit * (its largest diagonal entry) or below
//    (e.g. a rank-deficient history: repeated directions, or f constant in
//    some directions); never a NaN from a singular system;
//  * bad extrapolation: restart from the sample's best iterate when its
//    residual exceeds restart_factor x its best residual, and fall back to
//    plain mixing steps z + beta g (history recorded, not used) until the
//    residual drops below that best residual again, and for at least
//    plain_steps_after_restart steps. Without the fallback Anderson can cycle
//    forever around a local minimum of |f(z) - z| that is not a fixed point
//    (seen on the modern Hopfield map near a saddle of the energy, where the
//    plain CCCP steps escape and converge).
//
//   implicit::AndersonSolver<double>::Options options;
//   options.memory = 5;
//   options.absolute_tolerance = 1e-10;
//   implicit::AndersonSolver<double> solver(options);   // throws on bad options
//   implicit::Summary summary = solver.Solve(map, z);   // z: n x B, updated in place
#pragma once

#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/solver.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace implicit {

template <typename Scalar>
class AndersonSolver : public Solver<Scalar> {
 public:
  struct Options : SolverOptions {
    // m: the number of (dZ, dG) difference pairs each sample keeps (the oldest
    // is overwritten when full). >= 1.
    int memory = 5;
    // beta: weight of the residual g = f(z) - z in the update (1 = undamped
    // Anderson; beta < 1 damps, as in Picard's `damping`). Finite and > 0.
    double mixing = 1.0;
    // Relative Tikhonov ridge: the least-squares system solved is
    // (dG^T dG + lambda I) gamma = dG^T g with lambda = ridge * trace(dG^T dG) / k
    // (k = stored pairs), i.e. relative to the mean squared norm of the history.
    // Being relative it scales with the residuals; an absolute ridge would
    // swamp dG^T dG at small residuals and stall the method. Finite and >= 0.
    double ridge = 1e-10;
    // Safeguard: when a sample's residual |f(z_b) - z_b| exceeds
    // restart_factor x its best residual so far, the sample's history is
    // cleared and it restarts from its best iterate (f is re-evaluated there
    // on the next iteration). 0 disables the safeguard; otherwise >= 1.
    double restart_factor = 10.0;
    // After such a restart, the least number of plain mixing steps z + beta g
    // taken before extrapolating again; the fallback lasts until the residual
    // is below the best residual at the restart (the history is kept). >= 0.
    int plain_steps_after_restart = 5;
    // Ill-conditioning test: during the Cholesky factorisation of the ridged
    // k x k system M, the history is cleared (and a plain mixing step taken)
    // when a pivot d_j = M_jj - sum_{l<j} L_jl^2 satisfies
    // d_j <= condition_limit * max_i M_ii (or is not finite). The ratio
    // approximates 1/cond(M) = 1/cond(dG)^2. In [0, 1); the default,
    // 100 x machine epsilon of Scalar, only catches numerically singular
    // systems (in double the relative ridge acts first).
    double condition_limit = 100.0 * static_cast<double>(std::numeric_limits<Scalar>::epsilon());

    // Checks every field (the shared ones first); on failure names the field in *error.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error)) return false;
      auto fail = [error](const std::string& message) {
        if (error != nullptr) *error = message;
        return false;
      };
      if (memory < 1) return fail("memory must be >= 1, got " + std::to_string(memory));
      if (!(mixing > 0.0) || !std::isfinite(mixing))
        return fail("mixing must be finite and > 0, got " + std::to_string(mixing));
      if (!(ridge >= 0.0) || !std::isfinite(ridge))
        return fail("ridge must be finite and >= 0, got " + std::to_string(ridge));
      if (!(restart_factor == 0.0 || restart_factor >= 1.0) || std::isnan(restart_factor))
        return fail("restart_factor must be 0 (off) or >= 1, got " +
                    std::to_string(restart_factor));
      if (plain_steps_after_restart < 0)
        return fail("plain_steps_after_restart must be >= 0, got " +
                    std::to_string(plain_steps_after_restart));
      if (!(condition_limit >= 0.0 && condition_limit < 1.0))
        return fail("condition_limit must be in [0, 1), got " + std::to_string(condition_limit));
      return true;
    }
  };

  explicit AndersonSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  const Options& options() const { return options_; }
  std::string name() const override { return "anderson"; }

  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override {
    internal::BatchMonitor<Scalar> monitor(options_, name());
    monitor.Begin(map, z);
    const Index n = z.rows(), batch = z.cols(), m = options_.memory;
    const Scalar beta = static_cast<Scalar>(options_.mixing);

    // ---- all memory, allocated once -------------------------------------
    Matrix<Scalar> fz(n, batch);
    Matrix<Scalar> z_prev(n, batch), g_prev(n, batch);  // last iterate and its residual
    Matrix<Scalar> dz(n, m * batch), dg(n, m * batch);  // sample b: columns [b m, b m + m)
    Matrix<double> gram(m, m * batch);                  // dG^T dG of sample b: block b
    Matrix<double> chol(m, m);                          // ridged system, then its factor
    Vector<double> rhs(m), gamma(m);
    std::vector<int> count(batch, 0), next(batch, 0);   // stored pairs, next slot to write
    std::vector<char> has_prev(batch, 0);
    std::vector<int> plain_left(batch, 0);              // fallback: plain steps still due
    std::vector<double> fallback_until(batch, -1.0);    // fallback while residual >= this
    int restarts = 0;

    auto clear_history = [&](Index b) {
      count[b] = 0;
      next[b] = 0;
      ++restarts;
    };

    map.Evaluate(z, fz);
    monitor.CountEvaluations();
    while (monitor.Observe(z, fz)) {
      for (Index b = 0; b < batch; ++b) {
        if (!monitor.active(b)) continue;
        auto zb = z.col(b);
        const Index base = b * m;

        // Safeguard: a bad extrapolation sends the sample back to its best iterate.
        const double r = static_cast<double>((fz.col(b) - zb).norm());
        const bool in_fallback = fallback_until[b] >= 0.0;
        if (in_fallback && plain_left[b] == 0 && r < fallback_until[b]) fallback_until[b] = -1.0;
        if (!in_fallback && options_.restart_factor > 0.0 && has_prev[b] &&
            r > options_.restart_factor * monitor.best_residual(b)) {
          clear_history(b);
          has_prev[b] = 0;
          plain_left[b] = options_.plain_steps_after_restart;
          fallback_until[b] = monitor.best_residual(b);
          zb = monitor.best_iterate(b);
          continue;
        }

        // Push the newest difference pair into the ring and update the Gram block.
        if (has_prev[b]) {
          const Index slot = next[b];
          dz.col(base + slot) = zb - z_prev.col(b);
          dg.col(base + slot) = (fz.col(b) - zb) - g_prev.col(b);
          count[b] = std::min<int>(count[b] + 1, static_cast<int>(m));
          next[b] = static_cast<int>((slot + 1) % m);
          for (Index j = 0; j < count[b]; ++j) {
            const double v = static_cast<double>(dg.col(base + slot).dot(dg.col(base + j)));
            gram(slot, base + j) = v;
            gram(j, base + slot) = v;
          }
        }
        z_prev.col(b) = zb;
        g_prev.col(b) = fz.col(b) - zb;
        has_prev[b] = 1;
        auto gb = g_prev.col(b);

        const Index k = count[b];
        bool extrapolate = k > 0 && fallback_until[b] < 0.0;
        if (plain_left[b] > 0) --plain_left[b];
        if (extrapolate) {
          for (Index i = 0; i < k; ++i) rhs(i) = static_cast<double>(dg.col(base + i).dot(gb));
          extrapolate = SolveGram(gram.block(0, base, k, k), k, &chol, &rhs, &gamma);
          if (!extrapolate) clear_history(b);
        }
        zb += beta * gb;
        if (extrapolate) {
          for (Index i = 0; i < k; ++i) {
            const Scalar c = static_cast<Scalar>(gamma(i));
            zb -= c * (dz.col(base + i) + beta * dg.col(base + i));
          }
        }
      }
      map.Evaluate(z, fz);
      monitor.CountEvaluations();
    }
    Summary summary = monitor.Finish(z);
    if (restarts > 0) summary.message += "; " + std::to_string(restarts) + " history restarts";
    return summary;
  }

 private:
  // Solves (G + lambda I) gamma = rhs for the k x k Gram block G with the
  // relative ridge, by an in-place Cholesky factorisation in `chol`. Returns
  // false (history must be cleared) when a pivot fails the condition test.
  bool SolveGram(const Eigen::Ref<const Matrix<double>>& G, Index k, Matrix<double>* chol_ptr,
                 Vector<double>* rhs_ptr, Vector<double>* gamma_ptr) const {
    Matrix<double>& L = *chol_ptr;
    Vector<double>& rhs = *rhs_ptr;
    Vector<double>& gamma = *gamma_ptr;
    double trace = 0.0;
    for (Index i = 0; i < k; ++i) trace += G(i, i);
    const double lambda = options_.ridge * trace / static_cast<double>(k);
    double max_diag = 0.0;
    for (Index i = 0; i < k; ++i) max_diag = std::max(max_diag, G(i, i) + lambda);
    if (!(max_diag > 0.0) || !std::isfinite(max_diag)) return false;
    const double threshold = options_.condition_limit * max_diag;
    for (Index j = 0; j < k; ++j) {
      double d = G(j, j) + lambda;
      for (Index l = 0; l < j; ++l) d -= L(j, l) * L(j, l);
      if (!(d > threshold) || !std::isfinite(d)) return false;
      const double ljj = std::sqrt(d);
      L(j, j) = ljj;
      for (Index i = j + 1; i < k; ++i) {
        double s = G(i, j);
        for (Index l = 0; l < j; ++l) s -= L(i, l) * L(j, l);
        L(i, j) = s / ljj;
      }
    }
    // L y = rhs, then L^T gamma = y.
    for (Index i = 0; i < k; ++i) {
      double s = rhs(i);
      for (Index l = 0; l < i; ++l) s -= L(i, l) * gamma(l);
      gamma(i) = s / L(i, i);
    }
    for (Index i = k - 1; i >= 0; --i) {
      double s = gamma(i);
      for (Index l = i + 1; l < k; ++l) s -= L(l, i) * gamma(l);
      gamma(i) = s / L(i, i);
    }
    for (Index i = 0; i < k; ++i) {
      if (!std::isfinite(gamma(i))) return false;
    }
    return true;
  }

  Options options_;
};

}  // namespace implicit
