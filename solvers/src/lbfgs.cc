// LbfgsSolver: one ceres::GradientProblem per sample, run in lockstep (lockstep.h).
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/lbfgs.h>

#include <ceres/ceres.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep.h"

namespace implicit {
namespace {

using internal::BarrierCallback;
using internal::FromCeres;
using internal::Lockstep;

// E and grad E of one sample; every evaluation goes to the coordinator.
class SampleEnergy final : public ceres::FirstOrderFunction {
 public:
  SampleEnergy(Lockstep* lockstep, int sample, int n)
      : lockstep_(lockstep), sample_(sample), n_(n) {}
  bool Evaluate(const double* parameters, double* cost, double* gradient) const override {
    Lockstep::Request request;
    request.sample = sample_;
    request.point = parameters;
    request.out_value = cost;
    request.out_vector = gradient;  // may be null: value only
    return lockstep_->Evaluate(&request);
  }
  int NumParameters() const override { return n_; }

 private:
  Lockstep* lockstep_;
  int sample_, n_;
};

}  // namespace

template <typename Scalar>
Summary LbfgsSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  const Energy<Scalar>* energy = map.energy();
  if (energy == nullptr) {
    throw std::invalid_argument("lbfgs needs an energy; this map has none");
  }
  if (energy->dimension() != map.dimension()) {
    throw std::invalid_argument("lbfgs: the map's energy has dimension " +
                                std::to_string(energy->dimension()) + " but the map has " +
                                std::to_string(map.dimension()));
  }
  internal::BatchMonitor<Scalar> monitor(options_, name());
  monitor.Begin(map, z);
  const Index n = z.rows();
  const int batch = static_cast<int>(z.cols());

  Matrix<Scalar> fz(n, batch), zt(n, batch), gt(n, batch);
  Vector<Scalar> values(batch);
  if (n == 0) {
    monitor.Observe(z, fz);
    return monitor.Finish(z);
  }
  std::vector<std::vector<double>> params(batch, std::vector<double>(n));
  for (int b = 0; b < batch; ++b) {
    for (Index i = 0; i < n; ++i) params[b][i] = static_cast<double>(z(i, b));
  }
  std::vector<ceres::TerminationType> ceres_end(batch, ceres::FAILURE);
  std::vector<std::string> ceres_message(batch);

  // Iteration 0 is observed here, before any Ceres run starts: a sample that
  // is already converged or non-finite at its start never gets a Ceres problem.
  map.Evaluate(z, fz);
  monitor.CountEvaluations();
  if (!monitor.Observe(z, fz)) return monitor.Finish(z);
  std::vector<char> launch(batch);
  for (int b = 0; b < batch; ++b) launch[b] = monitor.active(b) ? 1 : 0;
  bool initial_barrier = true;  // Ceres' iteration 0 is the one observed above

  ceres::GradientProblemSolver::Options ceres_options;
  ceres_options.line_search_direction_type = ceres::LBFGS;
  ceres_options.line_search_type = ceres::WOLFE;
  ceres_options.max_lbfgs_rank = options_.memory;
  ceres_options.use_approximate_eigenvalue_bfgs_scaling = options_.eigenvalue_scaling;
  ceres_options.max_num_iterations = options_.max_iterations + 1;  // the monitor stops first
  ceres_options.function_tolerance = 0.0;  // convergence is decided by the monitor
  ceres_options.gradient_tolerance = 0.0;
  ceres_options.parameter_tolerance = 0.0;
  ceres_options.logging_type = ceres::SILENT;
  ceres_options.minimizer_progress_to_stdout = false;
  ceres_options.update_state_every_iteration = true;

  Lockstep lockstep(batch);

  auto body = [&](int b) {
    if (!launch[b]) return;
    ceres::GradientProblem problem(new SampleEnergy(&lockstep, b, static_cast<int>(n)));
    BarrierCallback barrier(&lockstep, b);
    ceres::GradientProblemSolver::Options options = ceres_options;
    options.callbacks.push_back(&barrier);
    ceres::GradientProblemSolver::Summary summary;
    ceres::Solve(options, problem, params[b].data(), &summary);
    ceres_end[b] = summary.termination_type;
    ceres_message[b] = summary.message;
  };

  // One batched Value call, plus one batched Gradient call when any sample needs it.
  auto serve = [&](std::vector<Lockstep::Request*>& requests) {
    zt = z;
    bool gradient = false;
    for (const Lockstep::Request* r : requests) {
      for (Index i = 0; i < n; ++i) zt(i, r->sample) = static_cast<Scalar>(r->point[i]);
      gradient = gradient || r->out_vector != nullptr;
    }
    energy->Value(zt, values);
    monitor.CountEvaluations();
    if (gradient) {
      energy->Gradient(zt, gt);
      monitor.CountEvaluations();
    }
    for (Lockstep::Request* r : requests) {
      const double e = static_cast<double>(values(r->sample));
      *r->out_value = e;
      bool ok = std::isfinite(e);
      if (r->out_vector != nullptr) {
        for (Index i = 0; i < n; ++i) {
          r->out_vector[i] = static_cast<double>(gt(i, r->sample));
          ok = ok && std::isfinite(r->out_vector[i]);
        }
      }
      r->ok = ok;
    }
  };

  // One batched map evaluation at the accepted points, then the monitor decides.
  std::vector<int> stopped_by_ceres;
  auto observe = [&](const std::vector<int>& at_barrier, const std::vector<int>& finished,
                     std::vector<char>* decision) {
    if (initial_barrier) {  // every Ceres run is at its iteration 0 (or ended there)
      initial_barrier = false;
      for (int b : finished) {
        if (monitor.active(b)) {
          monitor.StopSample(b, FromCeres(ceres_end[b]));
          stopped_by_ceres.push_back(b);
        }
      }
      for (int b : at_barrier) (*decision)[b] = monitor.active(b) ? 1 : 0;
      return;
    }
    bool any_active = false;
    auto take = [&](int b) {
      if (!monitor.active(b)) return;
      any_active = true;
      for (Index i = 0; i < n; ++i) z(i, b) = static_cast<Scalar>(params[b][i]);
    };
    for (int b : at_barrier) take(b);
    for (int b : finished) take(b);
    if (!any_active) return;
    map.Evaluate(z, fz);
    monitor.CountEvaluations();
    monitor.Observe(z, fz);
    for (int b : finished) {
      if (monitor.active(b)) {
        monitor.StopSample(b, FromCeres(ceres_end[b]));
        stopped_by_ceres.push_back(b);
      }
    }
    for (int b : at_barrier) (*decision)[b] = monitor.active(b) ? 1 : 0;
  };

  lockstep.Run(body, serve, observe);
  Summary summary = monitor.Finish(z);
  internal::NoteCeresStops(stopped_by_ceres, ceres_message, &summary);
  return summary;
}

template class LbfgsSolver<float>;
template class LbfgsSolver<double>;

}  // namespace implicit
