// implicit-compare: runs every selected forward solver on every selected
// built-in equilibrium problem (apps/problems/) and reports iterations,
// evaluations, residuals, time and converged samples as a table, JSON, CSV and
// a residual plot.
//
//   implicit-compare                                   # all solvers, all problems
//   implicit-compare --problem hopfield-digits --solvers picard,anderson --beta 2
//   implicit-compare --solver-options 'anderson:memory=10,mixing=0.5'
//   implicit-compare --json out.json --csv out.csv --plot residuals.png
//   mpirun -np 2 implicit-compare --problem hopfield-digits --patterns 1797   # batch over 2 ranks
//   implicit-compare --device cuda --problem hopfield-digits --solvers picard,anderson   # on the GPU
//
// Under mpirun the batch of every problem whose map is the same for all
// samples is split over the ranks (ShardedSolve: the table and JSON report the
// merged Summary; iterations are the slowest rank's, evaluations summed; no
// residual trace, so the plot draws such runs, like the KINSOL and PETSc
// backends' sample-by-sample solves, as their end point); rank 0 prints.
// With --device cuda the problems that have a device map (hopfield-digits,
// sparse-hopfield with alpha 2) are solved on the GPU by the device solvers
// (picard, anderson; docs/gpu.md), with the same options and the same table;
// the other (problem, solver) pairs are reported as skipped, with the reason.
//
// The command line is in compare/options, the --json, --csv and --plot files in
// compare/results; this file runs the solvers and prints the table.
#include "common/cli.h"
#include "common/data_paths.h"
#include "common/format.h"
#include "common/output_files.h"
#include "common/progress.h"
#include "common/ranks.h"
#include "common/solvers.h"
#include "common/table.h"
#include "compare/options.h"
#include "compare/results.h"
#include "problems/problem_options.h"
#include "problems/problem_run.h"

#include <implicit/solvers/sharded_solve.h>
#ifdef IMPLICIT_WITH_CUDA
#include <implicit/solvers/cuda_solvers.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

// --device cuda: a problem's device map on the context, and the device solves.
class DeviceRun {
 public:
#ifdef IMPLICIT_WITH_CUDA
  DeviceRun(implicit::cuda::Context& context, const Problem& problem)
      : context_(context), map_(problem.MakeDeviceMap(context)) {}
  // "" when `solver` runs on this problem's device map, else why not.
  std::string SkipReason(const std::string& solver) const {
    if (map_ == nullptr) return "no device map for this problem on the GPU yet (docs/gpu.md)";
    const std::vector<std::string> names = implicit::cuda::DeviceSolverNames();
    if (std::find(names.begin(), names.end(), solver) == names.end())
      return "no device version of this solver (on the GPU: picard, anderson)";
    return "";
  }
  implicit::Summary Solve(const std::string& solver, const implicit::SolverOptions& common,
                          const SolverOptionMap& options, Matrix<double>& z) const {
    const auto it = options.find(solver);
    auto device_solver = implicit::cuda::MakeDeviceSolver<double>(
        solver, it == options.end() ? std::map<std::string, std::string>{} : it->second, common);
    return device_solver->Solve(context_, *map_, z);
  }

 private:
  implicit::cuda::Context& context_;
  std::unique_ptr<implicit::cuda::DeviceMap<double>> map_;
#else
  std::string SkipReason(const std::string&) const { return "built without CUDA"; }
  implicit::Summary Solve(const std::string&, const implicit::SolverOptions&, const SolverOptionMap&,
                          Matrix<double>&) const {
    return {};
  }
#endif
};

// Runs one solver on one problem (or says why it does not apply). Under
// mpirun the batch is split over the ranks (ShardedSolve) when the problem's
// map is the same function for every sample; a problem with per-sample data
// (an input injection, clamps) is solved whole on every rank.
Result RunOne(const Options& o, const Problem& problem, const std::string& solver_name, const std::string& prefix,
              Progress& progress, const DeviceRun* device) {
  const implicit::Communicator& comm = AppCommunicator();
  Result r;
  StartRun(problem, solver_name, &r);
  if (device != nullptr) {
    r.message = device->SkipReason(solver_name);
    r.skipped = !r.message.empty();
    r.status = r.skipped ? "skipped" : "";
  }
  if (r.skipped) return r;
  // The backends solve sample by sample: no batch iterations to trace.
  const bool backend = implicit::SolverLibrary(solver_name) != "libimplicit";
  implicit::SolverOptions common = RunOptions(o.tol, o.max_iter, !backend);
  common.callback = [&](const implicit::IterationSummary& it) {
    progress.Update(prefix + ": iteration " + std::to_string(it.iteration) + ", residual " +
                    Fmt(it.max_residual, 3) + ", " + std::to_string(it.num_converged) + "/" +
                    std::to_string(r.samples) + " converged");
    return implicit::CallbackReturnType::kContinue;
  };
  progress.Update(prefix + ": starting", true);
  try {
    Matrix<double> z = problem.initial();
    if (device != nullptr) {
      r.summary = device->Solve(solver_name, common, o.solver_options, z);
    } else {
      std::unique_ptr<implicit::Solver<double>> solver = MakeSolver(solver_name, common, o.solver_options);
      r.summary = comm.size() > 1 && problem.map().SupportsSubsets()
                      ? implicit::ShardedSolve(*solver, problem.map(), z, comm)
                      : solver->Solve(problem.map(), z);
    }
    r.status = implicit::TerminationTypeToString(r.summary.termination_type);
  } catch (const std::exception& e) {
    r.Fail(e);
  }
  return r;
}

// Every (problem, solver) pair, problems in the outer loop.
std::vector<Result> RunAll(const Options& o, const implicit::DigitsDataset& digits, double* seconds) {
  Progress progress(!o.quiet, 1.0);
  std::vector<Result> results;
  const std::size_t total = o.problems.names.size() * o.solvers.size();
#ifdef IMPLICIT_WITH_CUDA
  std::unique_ptr<implicit::cuda::Context> context;
  if (o.device == "cuda") {
    context = std::make_unique<implicit::cuda::Context>();
    std::cout << "device: " << context->device_name() << "\n";
  }
#else
  if (o.device == "cuda")
    throw UsageError("--device cuda: this build has no CUDA backend (configure with IMPLICIT_WITH_CUDA=ON)");
#endif
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& problem_name : o.problems.names) {
    std::unique_ptr<Problem> problem = MakeProblemOf<double>(problem_name, digits, o.problems.settings);
    if (!o.quiet) std::cerr << problem->name() << ": " << problem->description() << "\n";
    std::unique_ptr<DeviceRun> device;
#ifdef IMPLICIT_WITH_CUDA
    if (context != nullptr) device = std::make_unique<DeviceRun>(*context, *problem);
#endif
    for (const std::string& solver_name : o.solvers) {
      const std::string prefix = "[" + std::to_string(results.size() + 1) + "/" + std::to_string(total) + "] " +
                                 problem_name + " / " + solver_name;
      results.push_back(RunOne(o, *problem, solver_name, prefix, progress, device.get()));
    }
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.Update("done: " + std::to_string(results.size()) + " runs in " + FmtFixed(*seconds, 2) + " s", true);
  progress.Done();
  return results;
}

void PrintTable(const Options& o, const std::vector<Result>& results, double seconds) {
  Table table({"problem", "solver", "status", "iterations", "f evals", "evals/sample", "J products", "residual",
               "seconds", "converged"},
              {false, false, false, true, true, true, true, true, true, true});
  for (const Result& r : results) {
    const implicit::Summary& s = r.summary;
    if (!r.ran()) {
      table.AddRow({r.problem, r.solver, r.status, "-", "-", "-", "-", "-", "-", "0/" + std::to_string(r.samples)});
    } else {
      table.AddRow({r.problem, r.solver, r.status, std::to_string(s.iterations),
                    std::to_string(s.function_evaluations), FmtFixed(EvaluationsPerSample(s), 1),
                    std::to_string(s.jacobian_products), Fmt(s.absolute_residual, 3),
                    FmtFixed(s.wall_time_seconds, 3),
                    std::to_string(s.num_converged()) + "/" + std::to_string(s.num_samples())});
    }
  }
  table.Print(std::cout);
  for (const Result& r : results)
    if (!r.ran())
      std::cout << (r.skipped ? "skipped " : "failed ") << r.problem << " / " << r.solver << ": " << r.message << "\n";
  std::cout << "tolerance " << Fmt(o.tol) << " on |f(z) - z| per sample, at most " << o.max_iter
            << " iterations; total " << FmtFixed(seconds, 2) << " s\n";
}

int Run(int argc, char** argv) {
  const implicit::Communicator& comm = AppCommunicator();  // under mpirun: only rank 0 prints
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 0;
  const implicit::DigitsDataset digits = LoadDigitsOption(o.data);
  Require(o.patterns <= digits.size(), "--patterns: " + std::to_string(o.patterns) + " exceeds the " +
                                           std::to_string(digits.size()) + " digits in " + digits.source);
  o.problems.settings.patterns = static_cast<int>(o.patterns);
  for (const std::string& name : o.problems.names) CheckFiniteSettings(name, digits, o.problems.settings, false);
  Require(o.device == "cpu" || comm.size() == 1, "--device cuda runs in one process, not under mpirun");

  double seconds = 0;
  const std::vector<Result> results = RunAll(o, digits, &seconds);
  if (!comm.is_root()) return 0;
  PrintTable(o, results, seconds);
  // Every output asked for is written (by rank 0), or the run fails (exit 1)
  // naming each one that was not.
  Outputs outputs;
  outputs.Write("--json", o.json, [&] { WriteJson(o, results, digits.source); });
  outputs.Write("--csv", o.csv, [&] { WriteCsv(o.csv, results); });
  outputs.Write("--plot", o.plot, [&] {
    Plot(o.plot, o.problems.names, results);
    std::cout << "plot: " << o.plot << " (residual vs iteration and vs time, drawn with gnuplot)\n";
  });
  outputs.Finish();
  return 0;
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-compare", [&] { return implicit_apps::Run(argc, argv); });
}
