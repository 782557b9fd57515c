// Limited-memory "good" Broyden method for the root g(z) = f(z) - z = 0.
//
// Each sample keeps an approximation of the inverse Jacobian of g in
// Sherman-Morrison (low-rank) form
//
//   H = -I + sum_{i<k} u_i v_i^T,        step  p = -H g,   z <- z + t p
//
// and after each step s = z_new - z, y = g(z_new) - g(z) applies the good
// Broyden update H <- H + (s - H y) s^T H / (s^T H y), i.e. stores the pair
// u = (s - H y) / (s^T H y), v = H^T s. H starts at -I, so the first step is
// a plain Picard step z <- f(z). Storage is bounded by `memory` pairs per
// sample (2 n memory B scalars in all), never by the iteration count: when a
// sample's memory is full, its approximation restarts from -I. A tiny update
// denominator |s^T H y| <= sqrt(eps) |s| |H y| (or a non-finite one) also
// restarts that sample instead of dividing. All memory is allocated before the
// loop; the loop never touches the heap.
//
// Optional batched backtracking line search on |g|: each backtracking round is
// ONE batch evaluation of f in which only the samples still searching move.
//
//   implicit::BroydenSolver<double>::Options options;
//   options.memory = 20;
//   options.line_search = true;
//   implicit::Summary s = implicit::BroydenSolver<double>(options).Solve(map, z);
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
class BroydenSolver : public Solver<Scalar> {
 public:
  struct Options : SolverOptions {
    // Maximum number of rank-one pairs (u_i, v_i) each sample stores. When a
    // sample's memory is full its inverse-Jacobian approximation restarts
    // from -I, so storage never grows with the iteration count. >= 1.
    int memory = 20;
    // Backtracking on the residual norm: a step t p is accepted when
    // |g(z + t p)| <= (1 - sufficient_decrease t) |g(z)|; otherwise
    // t <- backtrack_factor t, for at most max_backtracks rounds (each round
    // is one batch evaluation of f for the samples still searching). When
    // every round fails, the last (shortest) step is taken and the sample's
    // approximation restarts from -I. false: always the full step t = 1.
    bool line_search = false;
    // Maximum backtracking rounds per iteration (line_search only). >= 1.
    int max_backtracks = 5;
    // Step shrink factor per backtracking round (line_search only). In (0, 1).
    double backtrack_factor = 0.5;
    // Armijo-like constant c of the acceptance test above (line_search only). In [0, 1).
    double sufficient_decrease = 1e-4;

    // Checks every field (the shared ones first); on failure names the field in *error.
    bool IsValid(std::string* error) const {
      if (!SolverOptions::IsValid(error)) return false;
      auto fail = [error](const std::string& message) {
        if (error != nullptr) *error = message;
        return false;
      };
      if (memory < 1) return fail("memory must be >= 1, got " + std::to_string(memory));
      if (max_backtracks < 1)
        return fail("max_backtracks must be >= 1, got " + std::to_string(max_backtracks));
      if (!(backtrack_factor > 0.0 && backtrack_factor < 1.0))
        return fail("backtrack_factor must be in (0, 1), got " + std::to_string(backtrack_factor));
      if (!(sufficient_decrease >= 0.0 && sufficient_decrease < 1.0))
        return fail("sufficient_decrease must be in [0, 1), got " +
                    std::to_string(sufficient_decrease));
      return true;
    }
  };

  explicit BroydenSolver(const Options& options = Options()) : options_(options) {
    std::string error;
    internal::ThrowIfInvalid(name(), options_.IsValid(&error), error);
  }
  const Options& options() const { return options_; }
  std::string name() const override { return "broyden"; }

  Summary Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const override {
    internal::BatchMonitor<Scalar> monitor(options_, name());
    monitor.Begin(map, z);
    const Index n = z.rows(), batch = z.cols(), m = options_.memory;
    const Scalar tiny = std::sqrt(std::numeric_limits<Scalar>::epsilon());

    // ---- all memory, allocated once -------------------------------------
    Matrix<Scalar> fz(n, batch), g(n, batch), p(n, batch);  // f(z), g(z), direction
    Matrix<Scalar> zt(n, batch), fzt(n, batch);             // trial point and f there
    Matrix<Scalar> u(n, m * batch), v(n, m * batch);        // sample b: columns [b m, b m + m)
    Vector<Scalar> hy(n), hts(n);                           // H y and H^T s
    std::vector<int> count(batch, 0);
    std::vector<Scalar> step(batch, Scalar(1));
    std::vector<double> g_norm(batch, 0.0);
    std::vector<char> searching(batch, 0), failed(batch, 0);
    int restarts = 0;

    map.Evaluate(z, fz);
    monitor.CountEvaluations();
    while (monitor.Observe(z, fz)) {
      // Direction p = -H g = g - sum u_i (v_i . g) and the full trial step.
      for (Index b = 0; b < batch; ++b) {
        if (!monitor.active(b)) {
          zt.col(b) = z.col(b);
          continue;
        }
        const Index base = b * m;
        g.col(b) = fz.col(b) - z.col(b);
        g_norm[b] = static_cast<double>(g.col(b).norm());
        p.col(b) = g.col(b);
        for (Index i = 0; i < count[b]; ++i) {
          p.col(b) -= v.col(base + i).dot(g.col(b)) * u.col(base + i);
        }
        step[b] = Scalar(1);
        failed[b] = 0;
        searching[b] = options_.line_search ? 1 : 0;
        zt.col(b) = z.col(b) + p.col(b);
      }
      map.Evaluate(zt, fzt);
      monitor.CountEvaluations();

      // Batched backtracking: one evaluation of f per round.
      if (options_.line_search) {
        for (int round = 0;; ++round) {
          bool any = false;
          for (Index b = 0; b < batch; ++b) {
            if (!searching[b]) continue;
            const double trial = static_cast<double>((fzt.col(b) - zt.col(b)).norm());
            const double t = static_cast<double>(step[b]);
            if (std::isfinite(trial) &&
                trial <= (1.0 - options_.sufficient_decrease * t) * g_norm[b]) {
              searching[b] = 0;
            } else if (round == options_.max_backtracks) {
              searching[b] = 0;
              failed[b] = 1;
            } else {
              step[b] *= static_cast<Scalar>(options_.backtrack_factor);
              zt.col(b) = z.col(b) + step[b] * p.col(b);
              any = true;
            }
          }
          if (!any) break;
          map.Evaluate(zt, fzt);
          monitor.CountEvaluations();
        }
      }

      // Accept the trial points and update each sample's approximation.
      for (Index b = 0; b < batch; ++b) {
        if (!monitor.active(b)) continue;
        const Index base = b * m;
        if (failed[b] || count[b] == m) {
          count[b] = 0;
          ++restarts;
        }
        if (!failed[b]) {
          // s = t p (in zt - z), y = g(zt) - g(z): stored in p and g.
          p.col(b) = zt.col(b) - z.col(b);
          g.col(b) = (fzt.col(b) - zt.col(b)) - g.col(b);
          auto s = p.col(b);
          auto y = g.col(b);
          hy = -y;
          hts = -s;
          for (Index i = 0; i < count[b]; ++i) {
            hy += v.col(base + i).dot(y) * u.col(base + i);
            hts += u.col(base + i).dot(s) * v.col(base + i);
          }
          const Scalar denom = s.dot(hy);
          const Scalar scale = s.norm() * hy.norm();
          if (std::isfinite(static_cast<double>(denom)) &&
              std::abs(denom) > tiny * scale && scale > Scalar(0)) {
            const Index slot = base + count[b];
            u.col(slot) = (s - hy) / denom;
            v.col(slot) = hts;
            ++count[b];
          } else {
            count[b] = 0;
            ++restarts;
          }
        }
        z.col(b) = zt.col(b);
        fz.col(b) = fzt.col(b);
      }
    }
    Summary summary = monitor.Finish(z);
    if (restarts > 0) summary.message += "; " + std::to_string(restarts) + " Broyden restarts";
    return summary;
  }

 private:
  Options options_;
};

}  // namespace implicit
