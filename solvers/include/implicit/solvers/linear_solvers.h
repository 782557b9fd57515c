// Matrix-free linear solvers for the backward (adjoint) pass.
//
// Each solves A u_b = rhs_b for every column b of a batch, where the operator
// is only available as a product on the whole batch:
//
//   apply(v, out):  out.col(b) = A_b v.col(b)        (v, out: n x B)
//
// (the implicit backward pass uses A = (I - df/dz)^T, see
// <implicit/diff/implicit_diff.h>). Samples are independent and converge
// independently: a converged column stops changing while the others go on
// (the operator is still applied to the whole batch).
//
//   implicit::LinearSolverOptions options;
//   options.tolerance = 1e-10;
//   implicit::Matrix<double> u = implicit::Matrix<double>::Zero(n, B);  // initial guess
//   implicit::LinearSolveSummary s = implicit::SolveLinearSystem<double>(
//       implicit::LinearSolverType::kGmres,
//       [&](implicit::ConstMatrixRef<double> v, implicit::MatrixRef<double> out) {
//         out.noalias() = A * v;
//       },
//       rhs, u, options);
//   if (!s.IsConverged()) std::cerr << s.BriefReport() << "\n";
//
// Solvers (type in C++, name at run time via StringToLinearSolverType):
//   "fixed_point"  Richardson u <- u + (rhs - A u); for A = I - J^T this is the
//                  adjoint fixed point u <- J^T u + g. Converges iff the spectral
//                  radius of I - A is < 1.
//   "anderson"     Anderson acceleration (window `memory`, relative ridge
//                  `regularization`) of that fixed point.
//   "broyden"      limited-memory "good" Broyden (`memory` stored updates) on it.
//                  These three run the forward solvers (PicardSolver,
//                  AndersonSolver, BroydenSolver) on the map u -> u + rhs - A u,
//                  with their safeguards (residual guard, stall rule, best
//                  iterate) and per-sample bookkeeping.
//   "cg"           conjugate gradients; A symmetric positive definite.
//   "minres"       MINRES (Paige-Saunders); A symmetric, may be indefinite.
//   "gmres"        restarted GMRES(restart) with modified Gram-Schmidt; any A.
//   "direct"       builds each sample's n x n matrix from n batch products and
//                  solves it by LU with full pivoting; a numerically singular
//                  matrix is a kFailure. Memory n*n*B: small problems only.
//
// Convergence is decided on the TRUE residual, never on a recurrence estimate:
// sample b converged when |rhs_b - A u_b| <= tolerance |rhs_b| + absolute_tolerance.
// Krylov methods whose estimate says "converged" recompute the true residual and
// restart if it disagrees. Memory is bounded by the options (a few n x B
// matrices; 2 memory of them for Anderson / Broyden, restart + 1 for GMRES),
// independent of the number of iterations. Failures (budget spent, divergence,
// NaN, breakdown, singular matrix) are reported per sample, never hidden; the
// column of u then holds the last iterate.
#pragma once

#include <implicit/core/types.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/solver.h>

#include <Eigen/Dense>

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

enum class LinearSolverType { kFixedPoint, kAnderson, kBroyden, kCg, kMinres, kGmres, kDirect };

// "fixed_point", "anderson", "broyden", "cg", "minres", "gmres", "direct".
inline const char* LinearSolverTypeToString(LinearSolverType type) {
  switch (type) {
    case LinearSolverType::kFixedPoint: return "fixed_point";
    case LinearSolverType::kAnderson: return "anderson";
    case LinearSolverType::kBroyden: return "broyden";
    case LinearSolverType::kCg: return "cg";
    case LinearSolverType::kMinres: return "minres";
    case LinearSolverType::kGmres: return "gmres";
    case LinearSolverType::kDirect: return "direct";
  }
  return "unknown";
}

// Parses a name as printed by LinearSolverTypeToString; false when unknown.
inline bool StringToLinearSolverType(const std::string& name, LinearSolverType* type) {
  for (LinearSolverType t :
       {LinearSolverType::kFixedPoint, LinearSolverType::kAnderson, LinearSolverType::kBroyden,
        LinearSolverType::kCg, LinearSolverType::kMinres, LinearSolverType::kGmres,
        LinearSolverType::kDirect}) {
    if (name == LinearSolverTypeToString(t)) {
      if (type != nullptr) *type = t;
      return true;
    }
  }
  return false;
}

// True for the solvers that assume a symmetric operator (cg, minres).
inline bool LinearSolverRequiresSymmetry(LinearSolverType type) {
  return type == LinearSolverType::kCg || type == LinearSolverType::kMinres;
}

struct LinearSolverOptions {
  // Sample b converged when |rhs_b - A u_b|_2 <= tolerance * |rhs_b|_2 + absolute_tolerance.
  double tolerance = 1e-10;
  double absolute_tolerance = 0.0;
  // Maximum number of iterations (Krylov steps / fixed-point updates), >= 0.
  // "direct" ignores it.
  int max_iterations = 200;
  // GMRES: Krylov vectors per cycle before a restart, >= 1.
  int restart = 30;
  // Anderson: window of stored differences; Broyden: stored rank-one updates
  // before a restart. >= 1.
  int memory = 5;
  // Anderson: ridge added to the least-squares normal equations, relative to
  // their mean diagonal (scale-free, so it does not stall at small residuals). >= 0.
  double regularization = 1e-12;
  // A sample diverged when its residual exceeds divergence_threshold times its
  // initial residual. > 1.
  double divergence_threshold = 1e8;

  // Checks every field; on failure names it in *error.
  bool IsValid(std::string* error) const {
    auto fail = [error](const std::string& m) {
      if (error != nullptr) *error = m;
      return false;
    };
    if (!(tolerance >= 0.0) || !std::isfinite(tolerance))
      return fail("tolerance must be finite and >= 0, got " + std::to_string(tolerance));
    if (!(absolute_tolerance >= 0.0) || !std::isfinite(absolute_tolerance))
      return fail("absolute_tolerance must be finite and >= 0, got " +
                  std::to_string(absolute_tolerance));
    if (max_iterations < 0)
      return fail("max_iterations must be >= 0, got " + std::to_string(max_iterations));
    if (restart < 1) return fail("restart must be >= 1, got " + std::to_string(restart));
    if (memory < 1) return fail("memory must be >= 1, got " + std::to_string(memory));
    if (!(regularization >= 0.0) || !std::isfinite(regularization))
      return fail("regularization must be finite and >= 0, got " +
                  std::to_string(regularization));
    if (!(divergence_threshold > 1.0))
      return fail("divergence_threshold must be > 1, got " +
                  std::to_string(divergence_threshold));
    return true;
  }
};

struct LinearSolveSummary {
  std::string solver;  // the solver's name ("gmres", ...)
  // kConverged only when every sample converged; otherwise the most severe
  // sample status: kNonFinite, kDiverged, kFailure, kStalled, kMaxIterations.
  TerminationType termination_type = TerminationType::kInvalidInput;
  std::string message;
  // The field names are the forward Summary's (solver.h) where they mean the same.
  int iterations = 0;         // batch iterations (Krylov steps / updates)
  // Batch applications of the operator A: in the IFT backward pass, (I - J)^T u,
  // one batch of vector-Jacobian products each.
  int jacobian_products = 0;
  // Max over samples of |rhs_b - A u_b| / |rhs_b| (|rhs_b - A u_b| when rhs_b = 0),
  // and of |rhs_b - A u_b|.
  double relative_residual = std::numeric_limits<double>::infinity();
  double absolute_residual = std::numeric_limits<double>::infinity();
  std::vector<TerminationType> sample_status;
  std::vector<double> sample_residual;           // |rhs_b - A u_b|, as in Summary
  std::vector<double> sample_relative_residual;  // that divided by |rhs_b| (when > 0)
  std::vector<int> sample_iterations;
  double wall_time_seconds = 0.0;

  bool IsConverged() const { return termination_type == TerminationType::kConverged; }
  int num_samples() const { return static_cast<int>(sample_status.size()); }
  int num_converged() const {
    return static_cast<int>(
        std::count(sample_status.begin(), sample_status.end(), TerminationType::kConverged));
  }
  // One line: solver, status, samples, iterations, products, residual, time.
  std::string BriefReport() const {
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s: %s, %d/%d samples converged, %d iterations, %d products, relative "
                  "residual %.3e, %.3f s",
                  solver.c_str(), TerminationTypeToString(termination_type), num_converged(),
                  num_samples(), iterations, jacobian_products, relative_residual,
                  wall_time_seconds);
    return line;
  }
};

// out = A v for a batch (n x B); out never aliases v.
template <typename Scalar>
using LinearOperator = std::function<void(ConstMatrixRef<Scalar>, MatrixRef<Scalar>)>;

// Solves A u = rhs column by column with the solver `type`; u (n x B) holds
// the initial guess on entry and the result on return. Throws
// std::invalid_argument on bad options or shapes.
template <typename Scalar>
LinearSolveSummary SolveLinearSystem(LinearSolverType type, const LinearOperator<Scalar>& apply,
                                     ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                     const LinearSolverOptions& options = LinearSolverOptions());

// The individual solvers (same contract as SolveLinearSystem).
template <typename Scalar>
LinearSolveSummary FixedPointLinearSolve(const LinearOperator<Scalar>& apply,
                                         ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                         const LinearSolverOptions& options);
template <typename Scalar>
LinearSolveSummary AndersonLinearSolve(const LinearOperator<Scalar>& apply,
                                       ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                       const LinearSolverOptions& options);
template <typename Scalar>
LinearSolveSummary BroydenLinearSolve(const LinearOperator<Scalar>& apply,
                                      ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                      const LinearSolverOptions& options);
template <typename Scalar>
LinearSolveSummary ConjugateGradientSolve(const LinearOperator<Scalar>& apply,
                                          ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                          const LinearSolverOptions& options);
template <typename Scalar>
LinearSolveSummary MinresSolve(const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
                               MatrixRef<Scalar> u, const LinearSolverOptions& options);
template <typename Scalar>
LinearSolveSummary GmresSolve(const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
                              MatrixRef<Scalar> u, const LinearSolverOptions& options);
template <typename Scalar>
LinearSolveSummary DirectLinearSolve(const LinearOperator<Scalar>& apply,
                                     ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                     const LinearSolverOptions& options);

// ===================== implementation ======================================
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

namespace internal {

// A u = rhs in fixed-point form, u = u + (rhs - A u): the map whose fixed
// point the forward solvers find (for A = I - J^T, u = J^T u + rhs).
template <typename Scalar>
class LinearFixedPointMap final : public FixedPointMap<Scalar> {
 public:
  LinearFixedPointMap(const LinearOperator<Scalar>& apply, const Matrix<Scalar>& rhs)
      : apply_(apply), rhs_(rhs) {}
  Index dimension() const override { return rhs_.rows(); }
  void Evaluate(ConstMatrixRef<Scalar> u, MatrixRef<Scalar> out) const override {
    apply_(u, out);
    out = u + rhs_ - out;
  }

 private:
  const LinearOperator<Scalar>& apply_;
  const Matrix<Scalar>& rhs_;
};

// Solves A u = rhs with the forward solver `solver` (picard, anderson,
// broyden) on LinearFixedPointMap, so that the adjoint solve has the forward
// solve's safeguards and per-sample bookkeeping. Every column is scaled by
// 1 / |rhs_b| first, so that the forward solver's one absolute tolerance is
// the per-sample relative one; the result is then checked on the true residual
// like every linear solve.
template <typename Scalar, typename SolverT>
LinearSolveSummary SolveInFixedPointForm(const char* name, typename SolverT::Options forward,
                                         const LinearOperator<Scalar>& apply,
                                         ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                         const LinearSolverOptions& options) {
  LinearMonitor<Scalar> m(name, apply, rhs, u, options);
  const Index batch = rhs.cols();
  Vector<Scalar> scale(batch);
  double largest = 0.0;
  for (Index b = 0; b < batch; ++b) {
    const Scalar norm = rhs.col(b).norm();
    scale(b) = norm > Scalar(0) && std::isfinite(static_cast<double>(norm)) ? norm : Scalar(1);
    largest = std::max(largest, static_cast<double>(scale(b)));
  }
  const Matrix<Scalar> scaled_rhs = rhs * scale.cwiseInverse().asDiagonal();
  u = u * scale.cwiseInverse().asDiagonal();
  forward.max_iterations = options.max_iterations;
  forward.absolute_tolerance = options.tolerance + options.absolute_tolerance / largest;
  forward.relative_tolerance = 0.0;
  forward.divergence_threshold = options.divergence_threshold;
  const Summary solved =
      SolverT(forward).Solve(LinearFixedPointMap<Scalar>(apply, scaled_rhs), u);
  u = u * scale.asDiagonal();
  Matrix<Scalar> r(rhs.rows(), batch);
  m.AddWork(solved.iterations, solved.function_evaluations);
  m.Residual(u, r);
  for (Index b = 0; b < batch; ++b) {
    if (solved.sample_status[b] != TerminationType::kConverged) m.Stop(b, solved.sample_status[b]);
  }
  LinearSolveSummary summary = m.Finish();
  summary.sample_iterations = solved.sample_iterations;
  return summary;
}

}  // namespace internal

template <typename Scalar>
LinearSolveSummary FixedPointLinearSolve(const LinearOperator<Scalar>& apply,
                                         ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                         const LinearSolverOptions& options) {
  return internal::SolveInFixedPointForm<Scalar, PicardSolver<Scalar>>(
      "fixed_point", typename PicardSolver<Scalar>::Options(), apply, rhs, u, options);
}

template <typename Scalar>
LinearSolveSummary AndersonLinearSolve(const LinearOperator<Scalar>& apply,
                                       ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                       const LinearSolverOptions& options) {
  typename AndersonSolver<Scalar>::Options forward;
  forward.memory = options.memory;
  forward.ridge = options.regularization;
  return internal::SolveInFixedPointForm<Scalar, AndersonSolver<Scalar>>(
      "anderson", forward, apply, rhs, u, options);
}

template <typename Scalar>
LinearSolveSummary BroydenLinearSolve(const LinearOperator<Scalar>& apply,
                                      ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                      const LinearSolverOptions& options) {
  typename BroydenSolver<Scalar>::Options forward;
  forward.memory = options.memory;
  return internal::SolveInFixedPointForm<Scalar, BroydenSolver<Scalar>>(
      "broyden", forward, apply, rhs, u, options);
}

template <typename Scalar>
LinearSolveSummary ConjugateGradientSolve(const LinearOperator<Scalar>& apply,
                                          ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                          const LinearSolverOptions& options) {
  internal::LinearMonitor<Scalar> m("cg", apply, rhs, u, options);
  const Index n = u.rows(), batch = u.cols();
  Matrix<Scalar> r(n, batch), p(n, batch), ap(n, batch);
  std::vector<Scalar> rs(batch);
  std::vector<char> run(batch);
  // Each cycle restarts from the true residual; a cycle ends for a sample when
  // its recurrence residual meets the threshold.
  while (m.Residual(u, r) && m.budget_left()) {
    p = r;
    int running = 0;
    for (Index b = 0; b < batch; ++b) {
      run[b] = m.active(b);
      running += run[b];
      rs[b] = r.col(b).squaredNorm();
      if (!run[b]) p.col(b).setZero();
    }
    while (running > 0 && m.budget_left()) {
      m.Apply(p, ap);
      m.CountIteration();
      for (Index b = 0; b < batch; ++b) {
        if (!run[b]) continue;
        const Scalar pap = p.col(b).dot(ap.col(b));
        if (!(pap > Scalar(0))) {
          m.Note("cg: p^T A p <= 0 (operator not positive definite)");
          m.Stop(b, TerminationType::kFailure);
          run[b] = 0;
          --running;
          p.col(b).setZero();
          continue;
        }
        const Scalar alpha = rs[b] / pap;
        u.col(b) += alpha * p.col(b);
        r.col(b) -= alpha * ap.col(b);
        const Scalar rs_new = r.col(b).squaredNorm();
        if (std::sqrt(static_cast<double>(rs_new)) <= m.threshold(b) ||
            !std::isfinite(static_cast<double>(rs_new))) {
          run[b] = 0;
          --running;
          p.col(b).setZero();
          continue;
        }
        p.col(b) = r.col(b) + (rs_new / rs[b]) * p.col(b);
        rs[b] = rs_new;
      }
    }
  }
  return m.Finish();
}

template <typename Scalar>
LinearSolveSummary MinresSolve(const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
                               MatrixRef<Scalar> u, const LinearSolverOptions& options) {
  internal::LinearMonitor<Scalar> m("minres", apply, rhs, u, options);
  const Index n = u.rows(), batch = u.cols();
  // Lanczos vectors r1, r2, y, v and search directions w, w1, w2 (Paige-Saunders).
  Matrix<Scalar> r(n, batch), r1(n, batch), r2(n, batch), y(n, batch), v(n, batch);
  Matrix<Scalar> w(n, batch), w1(n, batch), w2(n, batch);
  struct State {
    double beta, oldb, dbar, epsln, phibar, cs, sn;
    bool first;
  };
  std::vector<State> st(batch);
  std::vector<char> run(batch);
  while (m.Residual(u, r) && m.budget_left()) {
    r1 = r;
    r2 = r;
    y = r;
    w.setZero();
    w2.setZero();
    int running = 0;
    for (Index b = 0; b < batch; ++b) {
      run[b] = m.active(b);
      running += run[b];
      const double beta1 = static_cast<double>(r.col(b).norm());
      st[b] = {beta1, 0.0, 0.0, 0.0, beta1, -1.0, 0.0, true};
    }
    while (running > 0 && m.budget_left()) {
      for (Index b = 0; b < batch; ++b) {
        if (run[b]) {
          v.col(b) = y.col(b) / static_cast<Scalar>(st[b].beta);
        } else {
          v.col(b).setZero();
        }
      }
      m.Apply(v, y);
      m.CountIteration();
      for (Index b = 0; b < batch; ++b) {
        if (!run[b]) continue;
        State& s = st[b];
        if (!s.first) y.col(b) -= static_cast<Scalar>(s.beta / s.oldb) * r1.col(b);
        s.first = false;
        const double alfa = static_cast<double>(v.col(b).dot(y.col(b)));
        y.col(b) -= static_cast<Scalar>(alfa / s.beta) * r2.col(b);
        r1.col(b) = r2.col(b);
        r2.col(b) = y.col(b);
        s.oldb = s.beta;
        s.beta = static_cast<double>(y.col(b).norm());
        const double oldeps = s.epsln;
        const double delta = s.cs * s.dbar + s.sn * alfa;
        const double gbar = s.sn * s.dbar - s.cs * alfa;
        s.epsln = s.sn * s.beta;
        s.dbar = -s.cs * s.beta;
        double gamma = std::hypot(gbar, s.beta);
        gamma = std::max(gamma, std::numeric_limits<double>::min());
        s.cs = gbar / gamma;
        s.sn = s.beta / gamma;
        const double phi = s.cs * s.phibar;
        s.phibar = s.sn * s.phibar;
        w1.col(b) = w2.col(b);
        w2.col(b) = w.col(b);
        w.col(b) = (v.col(b) - static_cast<Scalar>(oldeps) * w1.col(b) -
                    static_cast<Scalar>(delta) * w2.col(b)) /
                   static_cast<Scalar>(gamma);
        u.col(b) += static_cast<Scalar>(phi) * w.col(b);
        // Estimate met, Krylov space exhausted (beta = 0) or broken: the next
        // cycle checks the true residual.
        if (std::abs(s.phibar) <= m.threshold(b) || !(s.beta > 0.0) ||
            !std::isfinite(s.phibar)) {
          run[b] = 0;
          --running;
        }
      }
    }
  }
  return m.Finish();
}

template <typename Scalar>
LinearSolveSummary GmresSolve(const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
                              MatrixRef<Scalar> u, const LinearSolverOptions& options) {
  internal::LinearMonitor<Scalar> m("gmres", apply, rhs, u, options);
  const Index n = u.rows(), batch = u.cols();
  const int k_max = options.restart;
  // The Krylov basis, allocated as it grows: a solve that converges in a few
  // products never touches the memory of the other restart - k vectors.
  std::vector<Matrix<Scalar>> V(k_max + 1);
  V[0].resize(n, batch);
  Matrix<Scalar> r(n, batch), w(n, batch);
  // Per sample: Hessenberg (k_max+1 x k_max), Givens cosines/sines, rhs g.
  std::vector<Matrix<double>> H(batch, Matrix<double>(k_max + 1, k_max));
  Matrix<double> cs(k_max, batch), sn(k_max, batch), g(k_max + 1, batch);
  Vector<double> coef(k_max);
  std::vector<int> steps(batch);
  std::vector<char> run(batch);
  while (m.Residual(u, r) && m.budget_left()) {
    int running = 0;
    for (Index b = 0; b < batch; ++b) {
      run[b] = m.active(b);
      running += run[b];
      steps[b] = 0;
      const double beta = static_cast<double>(r.col(b).norm());
      g.col(b).setZero();
      g(0, b) = beta;
      if (run[b]) {
        V[0].col(b) = r.col(b) / static_cast<Scalar>(beta);
      } else {
        V[0].col(b).setZero();
      }
    }
    for (int j = 0; j < k_max && running > 0 && m.budget_left(); ++j) {
      m.Apply(V[j], w);
      m.CountIteration();
      if (V[j + 1].size() == 0) V[j + 1].resize(n, batch);
      for (Index b = 0; b < batch; ++b) {
        if (!run[b]) {
          V[j + 1].col(b).setZero();
          continue;
        }
        Matrix<double>& h = H[b];
        for (int i = 0; i <= j; ++i) {  // modified Gram-Schmidt
          const Scalar hij = V[i].col(b).dot(w.col(b));
          h(i, j) = static_cast<double>(hij);
          w.col(b) -= hij * V[i].col(b);
        }
        const double hnext = static_cast<double>(w.col(b).norm());
        h(j + 1, j) = hnext;
        if (hnext > 0) {
          V[j + 1].col(b) = w.col(b) / static_cast<Scalar>(hnext);
        } else {
          V[j + 1].col(b).setZero();
        }
        for (int i = 0; i < j; ++i) {  // previous rotations
          const double a = h(i, j), c = h(i + 1, j);
          h(i, j) = cs(i, b) * a + sn(i, b) * c;
          h(i + 1, j) = -sn(i, b) * a + cs(i, b) * c;
        }
        const double rho = std::hypot(h(j, j), h(j + 1, j));
        if (rho > 0) {
          cs(j, b) = h(j, j) / rho;
          sn(j, b) = h(j + 1, j) / rho;
        } else {
          cs(j, b) = 1.0;
          sn(j, b) = 0.0;
        }
        h(j, j) = rho;
        h(j + 1, j) = 0.0;
        g(j + 1, b) = -sn(j, b) * g(j, b);
        g(j, b) = cs(j, b) * g(j, b);
        steps[b] = j + 1;
        if (std::abs(g(j + 1, b)) <= m.threshold(b) || !(hnext > 0) || !(rho > 0) ||
            !std::isfinite(g(j + 1, b))) {
          run[b] = 0;
          --running;
        }
      }
    }
    // u += V_k y with H_k y = g_k (upper triangular), per sample.
    for (Index b = 0; b < batch; ++b) {
      const int k = steps[b];
      if (k == 0) continue;
      const Matrix<double>& h = H[b];
      bool singular = false;
      for (int i = k - 1; i >= 0; --i) {
        double sum = g(i, b);
        for (int l = i + 1; l < k; ++l) sum -= h(i, l) * coef(l);
        if (!(std::abs(h(i, i)) > 0)) {
          singular = true;
          coef(i) = 0.0;
        } else {
          coef(i) = sum / h(i, i);
        }
      }
      if (singular) m.Note("gmres: singular Hessenberg matrix (singular operator)");
      for (int i = 0; i < k; ++i) u.col(b) += static_cast<Scalar>(coef(i)) * V[i].col(b);
    }
  }
  return m.Finish();
}

template <typename Scalar>
LinearSolveSummary DirectLinearSolve(const LinearOperator<Scalar>& apply,
                                     ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                     const LinearSolverOptions& options) {
  internal::LinearMonitor<Scalar> m("direct", apply, rhs, u, options);
  const Index n = u.rows(), batch = u.cols();
  Matrix<Scalar> r(n, batch);
  if (m.Residual(u, r)) {
    // Column i of every sample's matrix from one batch product with e_i.
    std::vector<Matrix<Scalar>> A(batch, Matrix<Scalar>(n, n));
    Matrix<Scalar> e = Matrix<Scalar>::Zero(n, batch), ae(n, batch);
    for (Index i = 0; i < n; ++i) {
      e.row(i).setOnes();
      m.Apply(e, ae);
      e.row(i).setZero();
      for (Index b = 0; b < batch; ++b) A[b].col(i) = ae.col(b);
    }
    for (Index b = 0; b < batch; ++b) {
      if (!m.active(b)) continue;
      if (!A[b].allFinite()) {
        m.Stop(b, TerminationType::kNonFinite);
        continue;
      }
      Eigen::FullPivLU<Matrix<Scalar>> lu(A[b]);
      if (!lu.isInvertible()) {
        m.Note("direct: singular matrix (rank " + std::to_string(lu.rank()) + " < " +
               std::to_string(n) + ")");
        m.Stop(b, TerminationType::kFailure);
        continue;
      }
      // Solve for the correction from the current residual (one refinement-ready step).
      u.col(b) += lu.solve(r.col(b));
    }
    m.CountIteration();
    m.Residual(u, r);
  }
  return m.Finish();
}

template <typename Scalar>
LinearSolveSummary SolveLinearSystem(LinearSolverType type, const LinearOperator<Scalar>& apply,
                                     ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                     const LinearSolverOptions& options) {
  switch (type) {
    case LinearSolverType::kFixedPoint: return FixedPointLinearSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kAnderson: return AndersonLinearSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kBroyden: return BroydenLinearSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kCg: return ConjugateGradientSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kMinres: return MinresSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kGmres: return GmresSolve<Scalar>(apply, rhs, u, options);
    case LinearSolverType::kDirect: return DirectLinearSolve<Scalar>(apply, rhs, u, options);
  }
  throw std::invalid_argument("SolveLinearSystem: unknown LinearSolverType");
}

// Compiled once for float and double (solvers/src/linear_solvers.cc; see
// "Compile once" in types.h). `prefix` is `extern` or empty.
#define IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, Solve, Scalar)                            \
  prefix template LinearSolveSummary Solve<Scalar>(const LinearOperator<Scalar>&,       \
                                                   ConstMatrixRef<Scalar>, MatrixRef<Scalar>, \
                                                   const LinearSolverOptions&)
#define IMPLICIT_LINEAR_SOLVES(prefix, Scalar)                                           \
  prefix template LinearSolveSummary SolveLinearSystem<Scalar>(                          \
      LinearSolverType, const LinearOperator<Scalar>&, ConstMatrixRef<Scalar>,           \
      MatrixRef<Scalar>, const LinearSolverOptions&);                                    \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, FixedPointLinearSolve, Scalar);                 \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, AndersonLinearSolve, Scalar);                   \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, BroydenLinearSolve, Scalar);                    \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, ConjugateGradientSolve, Scalar);                \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, MinresSolve, Scalar);                           \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, GmresSolve, Scalar);                            \
  IMPLICIT_LINEAR_SOLVE_INSTANCE(prefix, DirectLinearSolve, Scalar)
#ifndef IMPLICIT_NO_EXTERN_TEMPLATES
IMPLICIT_LINEAR_SOLVES(extern, float);
IMPLICIT_LINEAR_SOLVES(extern, double);
#endif

}  // namespace implicit
