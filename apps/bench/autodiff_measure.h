// The timings of implicit-bench --autodiff (autodiff_bench.h): a user energy's
// value, gradient, Hessian-vector product and parameter VJP in forward and
// reverse mode against its closed form (Measure, one Row), and a training step
// of fixed work through an equilibrium of an energy (MeasureTrainingStep).
#pragma once

#include "bench/autodiff_bench.h"
#include "common/timing.h"

#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy.h>
#include <implicit/core/types.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit_apps {
namespace autodiff {

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

// A rows x cols matrix of N(0, scale^2) entries from `seed`.
Matrix<double> Gaussian(Index rows, Index cols, double scale, unsigned seed);

// Seconds per sample of call(x) over the samples' columns: the median of
// `repeat` calls.
double SecondsPerSample(const std::function<void()>& call, long repeat, Index samples);

struct Row {
  std::string energy, style;
  Index n = 0;
  double value = 0;  // seconds per sample
  // Multiples of `value`; < 0: not measured.
  double gradient_forward = -1, gradient_reverse = -1, hvp_forward = -1, hvp_reverse = -1;
  double gradient_closed = -1, hvp_closed = -1;
  double hvp_kept = -1;  // a product of the Hessian kept at x (LinearizeHessian), reverse mode
  double vjp_reverse = -1, vjp_closed = -1;  // parameter VJP (energies with parameters)
  bool forward_one_sample = false;  // forward mode timed on one sample, once
};

// Times value, gradient and HVP of `energy` in both modes on B samples, and
// those of `closed` (the same energy in closed form) when given: reverse mode
// and the closed form with the value in 3 x repeat interleaved rounds,
// forward mode after them.
template <typename Functor>
Row Measure(const std::string& name, const std::string& style, implicit::AutoDiffEnergy<Functor, double> energy,
            const implicit::Energy<double>* closed, const AutodiffBenchOptions& o, unsigned seed) {
  const Index n = energy.dimension(), B = o.samples;
  const Matrix<double> x = Gaussian(n, B, 1.0 / std::sqrt(static_cast<double>(n)), seed);
  const Matrix<double> v = Gaussian(n, B, 1.0, seed + 1);
  Matrix<double> out(n, B);
  Vector<double> e(B);
  Row row;
  row.energy = name;
  row.style = style;
  row.n = n;
  energy.Value(x, e);
  if (closed != nullptr) {  // the closed form is the same energy
    Vector<double> closed_values(B);
    closed->Value(x, closed_values);
    const double error = (closed_values - e).norm();
    if (!(error <= 1e-9 * (1.0 + e.norm()))) {
      throw std::logic_error("implicit-bench --autodiff: the " + name +
                             " functor and its closed form differ by " + std::to_string(error));
    }
  }
  energy.set_mode(implicit::AutoDiffMode::kReverse);
  energy.Gradient(x.col(0), out.col(0));  // grows this thread's tape (not timed)
  // The products a Krylov solve makes at one point (the IFT backward's).
  const auto hessian = energy.LinearizeHessian(x);
  Vector<double> dtheta(energy.num_parameters());
  // The value and every reverse-mode and closed-form column, timed in
  // interleaved rounds so that each ratio to the value is taken under the
  // same load of a shared machine.
  std::vector<std::pair<double*, std::function<void()>>> timed = {
      {&row.value, [&] { energy.Value(x, e); }},
      {&row.gradient_reverse, [&] { energy.Gradient(x, out); }},
      {&row.hvp_reverse, [&] { energy.HessianVectorProduct(x, v, out); }},
      {&row.hvp_kept, [&] { hessian->JacobianVectorProduct(v, out); }}};
  if (closed != nullptr) {
    timed.push_back({&row.gradient_closed, [&] { closed->Gradient(x, out); }});
    timed.push_back({&row.hvp_closed, [&] { closed->HessianVectorProduct(x, v, out); }});
  }
  if (energy.num_parameters() > 0) {
    timed.push_back({&row.vjp_reverse, [&] { energy.ParameterVectorJacobianProduct(x, v, dtheta); }});
    if (closed != nullptr) {
      timed.push_back({&row.vjp_closed, [&] { closed->ParameterVectorJacobianProduct(x, v, dtheta); }});
    }
  }
  std::vector<std::function<void()>> calls;
  for (const auto& column : timed) calls.push_back(column.second);
  const std::vector<double> seconds = InterleavedMedianSeconds(calls, o.repeat * 3);
  row.value = seconds[0] / static_cast<double>(B);
  for (std::size_t k = 1; k < timed.size(); ++k) *timed[k].first = seconds[k] / static_cast<double>(B) / row.value;
  energy.set_mode(implicit::AutoDiffMode::kForward);
  // A forward gradient is about n/8 evaluations in 8-wide duals.
  const double estimate = row.value * static_cast<double>(n) * static_cast<double>(B);
  row.forward_one_sample = estimate > o.forward_budget;
  const Index fb = row.forward_one_sample ? 1 : B;
  const long fr = row.forward_one_sample ? 1 : o.repeat;
  const Matrix<double> xf = x.leftCols(fb), vf = v.leftCols(fb);
  Matrix<double> outf(n, fb);
  row.gradient_forward = SecondsPerSample([&] { energy.Gradient(xf, outf); }, fr, fb) / row.value;
  row.hvp_forward =
      SecondsPerSample([&] { energy.HessianVectorProduct(xf, vf, outf); }, fr, fb) / row.value;
  return row;
}

// One training step of fixed work through an equilibrium of `energy`: 30
// Picard iterations on the gradient-step map z - 0.1 grad E from z0
// (residuals only, as implicit-et's forward), then 100 GMRES iterations of the
// IFT backward of L = 0.5 |z* - target|^2 (tolerances too small to stop
// earlier: x-space gradient steps on the ET energy do not reach its
// equilibrium in such budgets, and equal work makes the two times comparable).
struct TrainingStep {
  double seconds = 0;  // per sample, the median of `repeat` steps
  int forward_iterations = 0, backward_iterations = 0;
};
TrainingStep MeasureTrainingStep(const implicit::Energy<double>& energy, const Matrix<double>& z0,
                                 const Matrix<double>& target, long repeat);

}  // namespace autodiff
}  // namespace implicit_apps
