// implicit-bench --device cuda: the Energy Transformer problem (cuda_bench_parts.h).
#ifdef IMPLICIT_WITH_CUDA

#include "bench/cuda_bench_parts.h"
#include "bench/et_shape.h"

#include <implicit/diff/cuda_backward.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/cuda_energy_transformer.h>
#include <implicit/layers/energy_transformer_map.h>
#include <implicit/solvers/cuda_solvers.h>
#include <implicit/solvers/registry.h>

#include <random>

namespace implicit_apps {
namespace device_bench {

using implicit::Index;
using implicit::Matrix;

// The Energy Transformer's clamped dynamics (image completion shape of
// implicit-et: 17 tokens of 32, 8 heads of 8, 32 ReLU memories, half of the
// 16 patch tokens free), B samples, double, on the device and on the CPU.
void RunEt(const DeviceBenchOptions& o, cuda::Context& context, std::vector<Row>* rows) {
  const implicit::EnergyTransformerOptions eo = ImplicitEtShape();
  implicit::EnergyTransformer<double> et(eo);
  const Index n = et.dimension(), B = o.et_samples;
  std::mt19937 gen(2);
  std::normal_distribution<double> normal(0.0, 1.0);
  Matrix<double> values(n, B), mask = Matrix<double>::Zero(n, B);
  for (Index j = 0; j < B; ++j) {
    for (Index i = 0; i < n; ++i) values(i, j) = normal(gen);
    std::vector<int> patches(16);
    for (int t = 0; t < 16; ++t) patches[t] = t + 1;  // token 0 is the class token
    std::shuffle(patches.begin(), patches.end(), gen);
    for (int t = 0; t < 8; ++t) mask.block(patches[t] * eo.token_dim, j, eo.token_dim, 1).setOnes();
  }
  const double step = 0.5;
  cuda::EnergyTransformerMap<double> map(context, et, step);
  map.SetClamp(context, mask, values);
  const cuda::DeviceMatrix<double> start(context, values);
  IterationMarks marks;
  implicit::SolverOptions base;
  base.absolute_tolerance = o.et_tol;
  base.max_iterations = static_cast<int>(o.max_iter);
  base.callback = marks.Callback();
  const std::string problem = "et-completion (B " + std::to_string(B) + ")";
  for (const std::string& name : o.solvers) {
    auto solver = cuda::MakeDeviceSolver<double>(name, {}, base);
    cuda::DeviceMatrix<double> z;
    implicit::Summary summary;
    rows->push_back(TimedRow(problem, "double", "gpu", name, static_cast<int>(o.repeat), true, std::nan(""),
                             static_cast<int>(B), &marks, summary, o.quiet, [&] {
                               z.CopyFrom(context, start);
                               summary = solver->Solve(context, map, z);
                             }));
  }
  // A training step's equilibrium part: the forward solve and the IFT backward
  // pass (adjoint tolerance 1e-8) for L = 0.5 |z*|^2, with the first solver.
  implicit::BackwardOptions backward;
  backward.tolerance = 1e-8;
  backward.max_iterations = 200;
  const std::string step_name = o.solvers.front() + " + IFT backward";
  {
    auto solver = cuda::MakeDeviceSolver<double>(o.solvers.front(), {}, base);
    cuda::DeviceMatrix<double> z, grad;
    implicit::Summary summary;
    implicit::Summary adjoint;
    auto train_step = [&] {
      z.CopyFrom(context, start);
      summary = solver->Solve(context, map, z);
      grad.CopyFrom(context, z);
      adjoint = cuda::ImplicitBackward(context, map, z, grad, backward).summary;
    };
    train_step();
    Row row{problem, "double", "gpu", step_name};
    row.seconds = MedianSeconds(train_step, o.repeat);
    row.floor = std::nan("");
    row.full_batch_iteration = std::nan("");
    Fill(&row, summary);
    rows->push_back(row);
    if (!o.quiet) std::cerr << "  gpu " << problem << " backward: " << adjoint.BriefReport() << "\n";
  }
  if (!o.cpu_reference) return;
  implicit::EnergyTransformerMap<double> cpu_map(et, step);
  cpu_map.SetClamp(mask, values);
  {
    auto solver = implicit::MakeSolver<double>(o.solvers.front(), {}, base);
    implicit::Summary summary;
    Matrix<double> z;
    implicit::LinearSolveSummary adjoint;
    Row row{problem, "double", CpuWhere(), step_name};
    row.seconds = MedianSeconds(
        [&] {
          z = values;
          summary = solver->Solve(cpu_map, z);
          adjoint = implicit::ImplicitBackward(cpu_map, z, z, backward).summary;
        },
        1);
    row.floor = std::nan("");
    row.full_batch_iteration = std::nan("");
    Fill(&row, summary);
    rows->push_back(row);
    if (!o.quiet) std::cerr << "  cpu " << problem << " backward: " << adjoint.solver << " "
                            << implicit::TerminationTypeToString(adjoint.termination_type) << ", "
                            << adjoint.iterations << " iterations\n";
  }
  {
    auto solver = implicit::MakeSolver<double>(o.solvers.front(), {}, base);
    implicit::Summary summary;
    Matrix<double> z;
    rows->push_back(TimedRow(problem, "double", CpuWhere(), o.solvers.front(), 1, false, std::nan(""),
                             static_cast<int>(B), &marks, summary, o.quiet, [&] {
                               z = values;
                               summary = solver->Solve(cpu_map, z);
                             }));
  }
}

}  // namespace device_bench
}  // namespace implicit_apps

#endif  // IMPLICIT_WITH_CUDA
