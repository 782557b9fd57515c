// The per-sample driver of the solver backends (internal): KINSOL and PETSc
// SNES (kinsol.h, petsc.h) solve one sample's system at a time with their own
// iteration; this driver poses each sample to them and holds every result to
// libimplicit's contract (solver.h), so that a backend's row in a comparison
// means what a built-in solver's row means.
//
//   Summary s = SolvePerSample<double>("kinsol-anderson", options, map, z,
//       [&](SampleProblem<double>& problem, double* u) -> LibraryVerdict {
//         ... run the library on problem.dimension() unknowns from u, calling
//         problem.Evaluate(u, g) (g = f(u)) and problem.JacobianVectorProduct ...
//         return {converged, iterations, "KIN_SUCCESS"};
//       });
//
// What the driver does, per sample b (in order, on the calling thread):
//  * the start: one batch evaluation of f(z); samples already within
//    tolerance (or non-finite) stop there, as in every built-in solver;
//  * the library's run: each evaluation it asks for is one column of f
//    (EvaluateColumns on {b} when the map SupportsColumnSubsets(), else a
//    batch evaluation with column b replaced: noted in the message), counted
//    in sample_evaluations[b]. An evaluation returns false — the library is
//    told the function failed — when f(u) is not finite (kNonFinite), when
//    the residual |f(u) - u| passes divergence_threshold x the initial one
//    (kDiverged), or when max_evaluations are spent (kMaxIterations);
//  * the verdict: a sample is kConverged only when the library says it
//    converged AND one fresh batch evaluation of f at the returned point meets
//    libimplicit's rule (|f(z_b) - z_b| <= absolute_tolerance or <=
//    relative_tolerance x |f(z_b)|); a library "converged" that fails the
//    check is kFailure, counted in the message. A sample the library did not
//    solve keeps the library's verdict (kMaxIterations, kFailure) and is
//    returned at the smallest-residual point it evaluated.
// Options the libraries cannot honour are refused, not ignored: record_trace
// (no batch iterations to trace) is an error in the backends' IsValid. The
// iteration callback is called once per finished sample (iteration = samples
// finished); kAbort stops the batch (the rest kUserAbort). max_stall_iterations
// and use_energy do not apply: the libraries stop on their own rules.
#pragma once

#include <implicit/core/map.h>
#include <implicit/core/types.h>
#include <implicit/solvers/internal/option_fields.h>
#include <implicit/solvers/internal/sample_judge.h>
#include <implicit/solvers/registry.h>
#include <implicit/solvers/solver.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace internal {

// What the library said about one sample.
struct LibraryVerdict {
  bool converged = false;
  int iterations = 0;                                       // the library's nonlinear iterations
  TerminationType failure = TerminationType::kFailure;      // the status when not converged
  std::string reason;                                       // the library's own code, for the message
};

// One sample's system as the library sees it: n unknowns in double precision.
template <typename Scalar>
class SampleProblem {
 public:
  SampleProblem(const FixedPointMap<Scalar>& map, ConstMatrixRef<Scalar> batch, Index sample,
                const SolverOptions& options, double initial_residual)
      : map_(map), batch_(batch), sample_(sample), options_(options), initial_residual_(initial_residual),
        n_(map.dimension()), u_(n_, 1), g_(n_, 1), v_(n_, 1), best_u_(batch.col(sample).template cast<double>()) {
    best_residual_ = initial_residual;
  }

  Index dimension() const { return n_; }
  Index sample() const { return sample_; }
  bool HasJacobianProducts() const { return map_.HasJacobianProducts(); }

  // g = f(u). false (and the reason kept) when the library must stop.
  bool Evaluate(const double* u, double* g) {
    if (stop_) return false;
    if (options_.max_evaluations > 0 && evaluations_ >= options_.max_evaluations) {
      stop_ = TerminationType::kMaxIterations;
      return false;
    }
    for (Index i = 0; i < n_; ++i) u_(i, 0) = static_cast<Scalar>(u[i]);
    ++evaluations_;
    if (map_.SupportsColumnSubsets()) {
      map_.EvaluateColumns(u_, {sample_}, g_);
    } else {
      whole_batch_ = true;
      Matrix<Scalar> z = batch_, fz(n_, batch_.cols());
      z.col(sample_) = u_.col(0);
      map_.Evaluate(z, fz);
      g_.col(0) = fz.col(sample_);
    }
    double r2 = 0.0;
    bool finite = true;
    for (Index i = 0; i < n_; ++i) {
      g[i] = static_cast<double>(g_(i, 0));
      finite = finite && std::isfinite(g[i]) && std::isfinite(u[i]);
      r2 += (g[i] - u[i]) * (g[i] - u[i]);
    }
    const double r = std::sqrt(r2);
    if (!finite || !std::isfinite(r)) {
      stop_ = TerminationType::kNonFinite;
      return false;
    }
    if (r < best_residual_) {
      best_residual_ = r;
      for (Index i = 0; i < n_; ++i) best_u_(i) = u[i];
    }
    if (r > options_.divergence_threshold * std::max(initial_residual_, std::numeric_limits<double>::min()) &&
        r > options_.absolute_tolerance) {
      stop_ = TerminationType::kDiverged;
      return false;
    }
    return true;
  }

  // out = (df/dz)(u) v. false when the map has none or a value is not finite.
  bool JacobianVectorProduct(const double* u, const double* v, double* out) {
    if (stop_ || !map_.HasJacobianProducts()) return false;
    for (Index i = 0; i < n_; ++i) {
      u_(i, 0) = static_cast<Scalar>(u[i]);
      v_(i, 0) = static_cast<Scalar>(v[i]);
    }
    ++jacobian_products_;
    if (map_.SupportsColumnJacobianProducts()) {
      map_.JacobianVectorProductColumns(u_, {sample_}, v_, g_);
    } else {
      whole_batch_ = true;
      Matrix<Scalar> z = batch_, w = Matrix<Scalar>::Zero(n_, batch_.cols()), out_batch(n_, batch_.cols());
      z.col(sample_) = u_.col(0);
      w.col(sample_) = v_.col(0);
      map_.JacobianVectorProduct(z, w, out_batch);
      g_.col(0) = out_batch.col(sample_);
    }
    bool finite = true;
    for (Index i = 0; i < n_; ++i) {
      out[i] = static_cast<double>(g_(i, 0));
      finite = finite && std::isfinite(out[i]);
    }
    if (!finite) stop_ = TerminationType::kNonFinite;
    return finite;
  }

  // ---- for the driver ----
  int evaluations() const { return evaluations_; }
  int jacobian_products() const { return jacobian_products_; }
  bool whole_batch() const { return whole_batch_; }
  const std::optional<TerminationType>& stop() const { return stop_; }
  double best_residual() const { return best_residual_; }
  const Vector<double>& best_u() const { return best_u_; }

 private:
  const FixedPointMap<Scalar>& map_;
  ConstMatrixRef<Scalar> batch_;  // the batch's current state (the other samples' columns)
  Index sample_;
  const SolverOptions& options_;
  double initial_residual_;
  Index n_;
  Matrix<Scalar> u_, g_, v_;  // n x 1 work columns
  Vector<double> best_u_;
  double best_residual_;
  int evaluations_ = 0, jacobian_products_ = 0;
  bool whole_batch_ = false;
  std::optional<TerminationType> stop_;
};

// Runs solve_one(problem, u) for every sample of z (see the top of the file)
// and returns the Summary. u holds the sample's start (n doubles) and receives
// the library's final point.
template <typename Scalar>
Summary SolvePerSample(const std::string& name, const SolverOptions& options, const FixedPointMap<Scalar>& map,
                       MatrixRef<Scalar> z,
                       const std::function<LibraryVerdict(SampleProblem<Scalar>&, double*)>& solve_one) {
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const Index n = map.dimension(), batch = z.cols();
  if (z.rows() != n)
    throw std::invalid_argument(name + ": z has " + std::to_string(z.rows()) + " rows, the map's dimension is " +
                                std::to_string(n));
  if (batch == 0 || n == 0) throw std::invalid_argument(name + ": empty batch");

  Summary summary;
  summary.solver = name;
  summary.sample_status.assign(batch, TerminationType::kMaxIterations);
  summary.sample_residual.assign(batch, std::numeric_limits<double>::infinity());
  summary.sample_iterations.assign(batch, 0);
  summary.sample_evaluations.assign(batch, 1);  // the start
  summary.sample_accelerated_steps.assign(batch, 0);
  summary.sample_backtracks.assign(batch, 0);
  summary.sample_fallbacks.assign(batch, 0);
  const SampleJudge<Scalar> judge(options, SampleRules{});

  Matrix<Scalar> fz(n, batch);
  map.Evaluate(z, fz);
  summary.function_evaluations = 1;
  std::vector<char> ran(batch, 0);  // the library ran on the sample; its verdict waits for the check
  std::vector<LibraryVerdict> verdicts(batch);
  bool whole_batch = false, aborted = false;
  int finished = 0, converged_so_far = 0;
  Vector<double> u(n);
  for (Index b = 0; b < batch; ++b) {
    const double r0 = static_cast<double>((fz.col(b) - z.col(b)).norm());
    const double f0 = static_cast<double>(fz.col(b).norm());
    summary.sample_residual[b] = r0;
    if (!std::isfinite(r0) || !std::isfinite(f0)) {
      summary.sample_status[b] = TerminationType::kNonFinite;
    } else if (judge.Converged(r0, f0)) {
      summary.sample_status[b] = TerminationType::kConverged;
      ++converged_so_far;
    } else if (aborted) {
      summary.sample_status[b] = TerminationType::kUserAbort;
      continue;
    } else {
      u = z.col(b).template cast<double>();
      SampleProblem<Scalar> problem(map, z, b, options, r0);
      LibraryVerdict verdict = solve_one(problem, u.data());
      if (problem.stop()) {  // the driver stopped the library
        verdict.converged = false;
        verdict.failure = *problem.stop();
      }
      const bool finite = u.allFinite();
      const bool keep_best = !verdict.converged || !finite;
      z.col(b) = (keep_best ? problem.best_u() : u).template cast<Scalar>();
      summary.sample_evaluations[b] += problem.evaluations();
      summary.function_evaluations += problem.evaluations();
      summary.jacobian_products += problem.jacobian_products();
      summary.sample_iterations[b] = verdict.iterations;
      whole_batch = whole_batch || problem.whole_batch();
      verdicts[b] = verdict;
      ran[b] = 1;
      if (verdict.converged) ++converged_so_far;
    }
    ++finished;
    if (options.callback) {
      IterationSummary it;
      it.iteration = finished;
      it.function_evaluations = summary.function_evaluations;
      it.max_residual = summary.sample_residual[b];
      it.num_converged = converged_so_far;
      it.num_active = static_cast<int>(batch - finished);
      it.seconds = seconds();
      aborted = options.callback(it) == CallbackReturnType::kAbort;
    }
  }

  // The check: f at every returned point, one batch evaluation.
  int refuted = 0;
  if (std::find(ran.begin(), ran.end(), 1) != ran.end()) {
    map.Evaluate(z, fz);
    ++summary.function_evaluations;
    for (Index b = 0; b < batch; ++b) {
      if (!ran[b]) continue;
      ++summary.sample_evaluations[b];
      const double r = static_cast<double>((fz.col(b) - z.col(b)).norm());
      const double f = static_cast<double>(fz.col(b).norm());
      summary.sample_residual[b] = std::isfinite(r) && std::isfinite(f) ? r : std::numeric_limits<double>::infinity();
      const bool meets_rule = std::isfinite(r) && std::isfinite(f) && judge.Converged(r, f);
      if (verdicts[b].converged && meets_rule) {
        summary.sample_status[b] = TerminationType::kConverged;
      } else if (verdicts[b].converged) {
        summary.sample_status[b] = TerminationType::kFailure;
        ++refuted;
      } else {
        summary.sample_status[b] = verdicts[b].failure;
      }
    }
  }

  double max_abs = 0.0, max_rel = 0.0;
  for (Index b = 0; b < batch; ++b) {
    const double r = summary.sample_residual[b];
    max_abs = std::max(max_abs, r);
    max_rel = std::max(max_rel, r / std::max(static_cast<double>(fz.col(b).norm()), std::numeric_limits<double>::min()));
    summary.iterations = std::max(summary.iterations, summary.sample_iterations[b]);
  }
  summary.absolute_residual = max_abs;
  summary.relative_residual = max_rel;
  summary.termination_type = BatchTermination(summary, aborted ? TerminationType::kUserAbort : TerminationType::kConverged);
  summary.message = BatchMessage(summary, true);
  if (refuted > 0)
    summary.message += "; " + std::to_string(refuted) +
                       " samples the library reported converged fail libimplicit's residual check (reported as failure)";
  std::string reasons;  // the library's codes of the unconverged samples, each once
  for (Index b = 0; b < batch; ++b) {
    const std::string& reason = verdicts[b].reason;
    if (ran[b] && summary.sample_status[b] != TerminationType::kConverged && !reason.empty() &&
        reasons.find(reason) == std::string::npos)
      reasons += (reasons.empty() ? "" : ", ") + reason;
  }
  if (!reasons.empty()) summary.message += "; library codes: " + reasons;
  if (whole_batch) summary.message += "; the map cannot evaluate one sample alone: each evaluation ran the whole batch";
  summary.wall_time_seconds = seconds();
  return summary;
}

// The factory of one backend method for the registry: SolverT<S>::Options
// derives from SolverOptions and has a `method` field; MethodName(method)
// (found by argument-dependent lookup) names the solver, fields(method) its
// option keys.
template <template <typename> class SolverT, typename S, typename Method>
SolverFactory<S> BackendFactory(Method method, OptionFields<typename SolverT<S>::Options> (*fields)(Method)) {
  return [method, fields](const std::map<std::string, std::string>& values,
                          const SolverOptions& base) -> std::unique_ptr<Solver<S>> {
    typename SolverT<S>::Options options;
    static_cast<SolverOptions&>(options) = base;
    options.method = method;
    ApplyOptions(MethodName(method), fields(method), values, &options);
    return std::make_unique<SolverT<S>>(options);  // validates the values
  };
}

// Registers one solver per method of a backend under `library`.
template <template <typename> class SolverT, typename Method>
void RegisterBackendSolvers(const std::string& library, std::initializer_list<Method> methods,
                            OptionFields<typename SolverT<float>::Options> (*fields_float)(Method),
                            OptionFields<typename SolverT<double>::Options> (*fields_double)(Method)) {
  for (Method method : methods) {
    SolverRegistration r;
    r.name = MethodName(method);
    r.library = library;
    r.option_names = OptionFieldNames(fields_double(method));
    r.make_float = BackendFactory<SolverT, float>(method, fields_float);
    r.make_double = BackendFactory<SolverT, double>(method, fields_double);
    RegisterSolver(std::move(r));
  }
}

}  // namespace internal
}  // namespace implicit
