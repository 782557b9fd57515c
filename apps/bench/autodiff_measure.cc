// The timings of implicit-bench --autodiff (autodiff_measure.h): the random
// matrices, the time per sample and the training step of fixed work.
#include "bench/autodiff_measure.h"

#include "common/timing.h"
#include "problems/problem.h"

#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/solvers/picard.h>

#include <functional>
#include <random>

namespace implicit_apps {
namespace autodiff {

Matrix<double> Gaussian(Index rows, Index cols, double scale, unsigned seed) {
  std::mt19937 rng(seed);
  return RandomGaussian(rows, cols, scale, rng);
}

double SecondsPerSample(const std::function<void()>& call, long repeat, Index samples) {
  return MedianSeconds(call, repeat) / static_cast<double>(samples);
}

TrainingStep MeasureTrainingStep(const implicit::Energy<double>& energy, const Matrix<double>& z0,
                                 const Matrix<double>& target, long repeat) {
  const implicit::GradientStepMap<double> map(energy, 0.1);
  implicit::PicardSolver<double>::Options options;
  options.max_iterations = 30;
  options.absolute_tolerance = 1e-14;
  options.use_energy = false;
  const implicit::PicardSolver<double> solver(options);
  implicit::BackwardOptions backward;
  backward.linear_solver = "gmres";
  backward.tolerance = 1e-14;
  backward.max_iterations = 100;
  // The forward solve is not converged by design: differentiate at its last
  // iterate (a rejected sample's adjoint would cost nothing, not equal work).
  backward.require_converged_forward = false;
  implicit::ImplicitLayer<double> layer(map, solver, backward);
  TrainingStep step;
  Matrix<double> z = z0;
  step.seconds = SecondsPerSample(
      [&] {
        z = z0;
        const implicit::Summary forward = layer.Forward(z);
        const implicit::BackwardResult<double> back = layer.Backward(z - target);
        step.forward_iterations = forward.iterations;
        step.backward_iterations = back.summary.iterations;
      },
      repeat, z0.cols());
  return step;
}

}  // namespace autodiff
}  // namespace implicit_apps
