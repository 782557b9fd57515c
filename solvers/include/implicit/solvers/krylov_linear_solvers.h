/// \file
/// The Krylov linear solvers: conjugate gradients ("cg", A symmetric positive
/// definite), MINRES ("minres", A symmetric, may be indefinite) and restarted
/// GMRES ("gmres", any A), batched, on the true residual. Called through
/// SolveLinearSystem (linear_solvers.h) or directly:
///
/// \code
///   implicit::LinearSolveSummary s = implicit::GmresSolve<double>(apply, rhs, u, options);
/// \endcode
#pragma once

#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/sample_loop.h>

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

/// The linear solver "cg": conjugate gradients for A u_b = rhs_b with A
/// symmetric positive definite, for every column b of rhs (n x B); u (n x B)
/// holds the initial guess on entry and the result on return. A direction
/// with p^T A p <= 0 makes the sample kFailure.
/// \throws std::invalid_argument on invalid options or when rhs is empty or
///         u's shape differs from rhs's.
template <typename Scalar>
LinearSolveSummary ConjugateGradientSolve(const LinearOperator<Scalar>& apply,
                                          ConstMatrixRef<Scalar> rhs, MatrixRef<Scalar> u,
                                          const LinearSolverOptions& options) {
  internal::BatchMonitor<Scalar> m("cg", apply, rhs, u, options);
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
          m.StopSample(b, TerminationType::kFailure);
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
  return m.FinishLinear();
}

/// The linear solver "minres": MINRES (Paige-Saunders) for A u_b = rhs_b with
/// A symmetric, possibly indefinite, for every column b of rhs (n x B); u
/// (n x B) holds the initial guess on entry and the result on return.
/// \throws std::invalid_argument on invalid options or when rhs is empty or
///         u's shape differs from rhs's.
template <typename Scalar>
LinearSolveSummary MinresSolve(const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
                               MatrixRef<Scalar> u, const LinearSolverOptions& options) {
  internal::BatchMonitor<Scalar> m("minres", apply, rhs, u, options);
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
  return m.FinishLinear();
}

/// The linear solver "gmres": restarted GMRES(options.restart) with modified
/// Gram-Schmidt for A u_b = rhs_b with any A, for every column b of rhs
/// (n x B); u (n x B) holds the initial guess on entry and the result on
/// return.
/// \throws std::invalid_argument on invalid options or when rhs is empty or
///         u's shape differs from rhs's.
template <typename Scalar>
LinearSolveSummary GmresSolve(const LinearOperator<Scalar>& apply, ConstMatrixRef<Scalar> rhs,
                              MatrixRef<Scalar> u, const LinearSolverOptions& options) {
  internal::BatchMonitor<Scalar> m("gmres", apply, rhs, u, options);
  const Index n = u.rows(), batch = u.cols();
  const int k_max = options.restart;
  // The Krylov basis, allocated as it grows: a solve that converges in a few
  // products never touches the memory of the other restart - k vectors.
  std::vector<Matrix<Scalar>> V(k_max + 1);
  V[0].resize(n, batch);
  Matrix<Scalar> r(n, batch), w(n, batch);
  // The Hessenberg matrices column by column, allocated as they grow too:
  // H[j](i, b) is entry (i, j) of sample b's. Givens cosines/sines, rhs g.
  std::vector<Matrix<double>> H(k_max);
  Matrix<double> cs(k_max, batch), sn(k_max, batch), g(k_max + 1, batch);
  std::vector<int> steps(batch);
  std::vector<char> run(batch), singular_hessenberg(batch, 0);
  std::vector<Index> columns;  // the samples an Arnoldi step (a back substitution) runs for
  columns.reserve(batch);
  const internal::SampleLoop samples(n * (k_max / 2 + 1));  // (the Arnoldi step grows with j)
  Matrix<double> coefficients(k_max, samples.threads());     // the back substitution's, per thread
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
      if (H[j].size() == 0) H[j].resize(j + 2, batch);
      columns.clear();
      for (Index b = 0; b < batch; ++b) {
        if (run[b]) {
          columns.push_back(b);
        } else {
          V[j + 1].col(b).setZero();
        }
      }
      // Each running sample's Arnoldi step, shared among Eigen's threads.
      samples.Run(columns, [&](Index b, int) {
        auto h = H[j].col(b);  // column j of sample b's Hessenberg matrix
        for (int i = 0; i <= j; ++i) {  // modified Gram-Schmidt
          const Scalar hij = V[i].col(b).dot(w.col(b));
          h(i) = static_cast<double>(hij);
          w.col(b) -= hij * V[i].col(b);
        }
        const double hnext = static_cast<double>(w.col(b).norm());
        h(j + 1) = hnext;
        if (hnext > 0) {
          V[j + 1].col(b) = w.col(b) / static_cast<Scalar>(hnext);
        } else {
          V[j + 1].col(b).setZero();
        }
        for (int i = 0; i < j; ++i) {  // previous rotations
          const double a = h(i), c = h(i + 1);
          h(i) = cs(i, b) * a + sn(i, b) * c;
          h(i + 1) = -sn(i, b) * a + cs(i, b) * c;
        }
        const double rho = std::hypot(h(j), h(j + 1));
        if (rho > 0) {
          cs(j, b) = h(j) / rho;
          sn(j, b) = h(j + 1) / rho;
        } else {
          cs(j, b) = 1.0;
          sn(j, b) = 0.0;
        }
        h(j) = rho;
        h(j + 1) = 0.0;
        g(j + 1, b) = -sn(j, b) * g(j, b);
        g(j, b) = cs(j, b) * g(j, b);
        steps[b] = j + 1;
        if (std::abs(g(j + 1, b)) <= m.threshold(b) || !(hnext > 0) || !(rho > 0) ||
            !std::isfinite(g(j + 1, b))) {
          run[b] = 0;
        }
      });
      running = static_cast<int>(std::count(run.begin(), run.end(), 1));
    }
    // u += V_k y with H_k y = g_k (upper triangular), per sample.
    columns.clear();
    for (Index b = 0; b < batch; ++b) {
      if (steps[b] > 0) columns.push_back(b);
    }
    samples.Run(columns, [&](Index b, int thread) {
      const int k = steps[b];
      auto coef = coefficients.col(thread);
      bool singular = false;
      for (int i = k - 1; i >= 0; --i) {
        double sum = g(i, b);
        for (int l = i + 1; l < k; ++l) sum -= H[l](i, b) * coef(l);
        if (!(std::abs(H[i](i, b)) > 0)) {
          singular = true;
          coef(i) = 0.0;
        } else {
          coef(i) = sum / H[i](i, b);
        }
      }
      singular_hessenberg[b] = singular ? 1 : 0;
      for (int i = 0; i < k; ++i) u.col(b) += static_cast<Scalar>(coef(i)) * V[i].col(b);
    });
    if (std::count(singular_hessenberg.begin(), singular_hessenberg.end(), 1) > 0) {
      m.Note("gmres: singular Hessenberg matrix (singular operator)");
      std::fill(singular_hessenberg.begin(), singular_hessenberg.end(), 0);
    }
  }
  return m.FinishLinear();
}

/// \cond INTERNAL
IMPLICIT_EXTERN_LINEAR_SOLVE(ConjugateGradientSolve);
IMPLICIT_EXTERN_LINEAR_SOLVE(MinresSolve);
IMPLICIT_EXTERN_LINEAR_SOLVE(GmresSolve);
/// \endcond

}  // namespace implicit
