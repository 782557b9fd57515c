// The per-sample bookkeeping every linear solve shares: validation, true
// residuals, per-sample statuses and the LinearSolveSummary.
#pragma once

#include <implicit/solvers/linear_solver_options.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace implicit {
namespace internal {

// Per-sample bookkeeping of a linear solve: true residuals, statuses, summary.
template <typename Scalar>
class LinearMonitor {
 public:
  LinearMonitor(const char* name, const LinearOperator<Scalar>& apply,
                ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                const LinearSolverOptions& options)
      : apply_(apply), rhs_(rhs), options_(options) {
    std::string error;
    ThrowIfInvalid(name, options.IsValid(&error), error);
    CheckBatch((std::string(name) + ": rhs").c_str(), rhs, rhs.rows());
    CheckShape((std::string(name) + ": u").c_str(), u, rhs.rows(), rhs.cols());
    start_ = std::chrono::steady_clock::now();
    summary_.solver = name;
    const Index batch = rhs.cols();
    rhs_norm_.resize(batch);
    threshold_.resize(batch);
    initial_.assign(batch, -1.0);
    for (Index b = 0; b < batch; ++b) {
      rhs_norm_[b] = static_cast<double>(rhs.col(b).norm());
      threshold_[b] = options.tolerance * rhs_norm_[b] + options.absolute_tolerance;
    }
    active_.assign(batch, 1);
    num_active_ = static_cast<int>(batch);
    summary_.sample_status.assign(batch, TerminationType::kMaxIterations);
    summary_.sample_residual.assign(batch, std::numeric_limits<double>::infinity());
    summary_.sample_relative_residual.assign(batch, std::numeric_limits<double>::infinity());
    summary_.sample_iterations.assign(batch, 0);
    residual_norm_.assign(batch, std::numeric_limits<double>::infinity());
  }

  const LinearSolverOptions& options() const { return options_; }
  bool active(Index b) const { return active_[b] != 0; }
  int num_active() const { return num_active_; }
  double threshold(Index b) const { return threshold_[b]; }
  int iterations() const { return summary_.iterations; }
  bool budget_left() const { return summary_.iterations < options_.max_iterations; }
  void CountIteration() { ++summary_.iterations; }
  // Work done on the operator outside Apply (a forward solver's iterations).
  void AddWork(int iterations, int products) {
    summary_.iterations += iterations;
    summary_.jacobian_products += products;
  }
  void Note(const std::string& note) {
    if (note_.find(note) == std::string::npos) note_ += "; " + note;
  }

  // out = A v, counted.
  void Apply(ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) {
    apply_(v, out);
    ++summary_.jacobian_products;
  }

  // r = rhs - A u (true residual), then marks active samples converged,
  // non-finite or diverged. Returns true while some sample is active.
  bool Residual(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> r) {
    Apply(u, r);
    r = rhs_ - r;
    for (Index b = 0; b < r.cols(); ++b) {
      const double rn = static_cast<double>(r.col(b).norm());
      residual_norm_[b] = rn;
      if (!active(b)) continue;
      if (!std::isfinite(rn) || !u.col(b).allFinite()) {
        Stop(b, TerminationType::kNonFinite);
      } else if (rn <= threshold_[b]) {
        Stop(b, TerminationType::kConverged);
      } else if (initial_[b] < 0) {
        initial_[b] = rn;
      } else if (rn > options_.divergence_threshold * initial_[b]) {
        Stop(b, TerminationType::kDiverged);
      }
    }
    return num_active_ > 0;
  }

  void Stop(Index b, TerminationType status) {
    if (!active(b)) return;
    active_[b] = 0;
    --num_active_;
    summary_.sample_status[b] = status;
    summary_.sample_iterations[b] = summary_.iterations;
  }

  // Completes the summary; the last Residual() call must describe the final u.
  LinearSolveSummary Finish() {
    const Index batch = rhs_.cols();
    summary_.relative_residual = summary_.absolute_residual = 0.0;
    for (Index b = 0; b < batch; ++b) {
      if (active(b)) Stop(b, TerminationType::kMaxIterations);
      const double rn = residual_norm_[b];
      const double rel = rhs_norm_[b] > 0 ? rn / rhs_norm_[b] : rn;
      summary_.sample_residual[b] = rn;
      summary_.sample_relative_residual[b] = rel;
      summary_.relative_residual = std::isfinite(rel)
                                       ? std::max(summary_.relative_residual, rel)
                                       : std::numeric_limits<double>::infinity();
      summary_.absolute_residual = std::isfinite(rn)
                                       ? std::max(summary_.absolute_residual, rn)
                                       : std::numeric_limits<double>::infinity();
    }
    const int converged = summary_.num_converged();
    summary_.termination_type = TerminationType::kConverged;
    if (converged != static_cast<int>(batch)) {
      summary_.termination_type = TerminationType::kMaxIterations;
      for (TerminationType t : {TerminationType::kMaxIterations, TerminationType::kStalled,
                                TerminationType::kFailure, TerminationType::kDiverged,
                                TerminationType::kNonFinite}) {
        if (std::count(summary_.sample_status.begin(), summary_.sample_status.end(), t) > 0) {
          summary_.termination_type = t;
        }
      }
    }
    summary_.message = std::to_string(converged) + "/" + std::to_string(batch) +
                       " samples converged" + note_;
    summary_.wall_time_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return std::move(summary_);
  }

 private:
  const LinearOperator<Scalar>& apply_;
  ConstMatrixRef<Scalar> rhs_;
  LinearSolverOptions options_;
  LinearSolveSummary summary_;
  std::vector<double> rhs_norm_, threshold_, initial_, residual_norm_;
  std::vector<char> active_;
  int num_active_ = 0;
  std::string note_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace internal
}  // namespace implicit
