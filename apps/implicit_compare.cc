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
#include "common/cli.h"
#include "common/data_paths.h"
#include "common/format.h"
#include "common/gnuplot.h"
#include "common/json_output.h"
#include "common/output_files.h"
#include "common/progress.h"
#include "common/ranks.h"
#include "common/solvers.h"
#include "common/table.h"
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

struct Options {
  ProblemSelection problems;
  std::vector<std::string> solvers = BuiltInSolvers();
  std::vector<std::string> solver_option_values;
  SolverOptionMap solver_options;
  double tol = 1e-8;
  long max_iter = 200, patterns = 100, seed = 1;
  std::string data, json, csv, plot, device = "cpu";
  bool quiet = false;
};

// The command line into `o`; false when it asked for --help or --list-problems.
bool ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app("Runs forward solvers on built-in equilibrium problems and compares them.", "implicit-compare");
  ConfigureApp(app);
  AddProblemOptions(app, &o->problems, false);
  AddList(app, "--solvers", &o->solvers,
          "comma-separated solver names, or all: libimplicit's and the\n"
          "KINSOL / PETSc backends built in (kinsol-*, petsc-*)",
          "libimplicit's");
  app.add_option("--solver-options", o->solver_option_values,
                 "solver-specific options SOLVER:KEY=VALUE,... (registry keys, e.g.\n"
                 "anderson:memory=10,mixing=0.5); repeat it or separate solvers by ';'")
      ->allow_extra_args(false)
      ->default_str("");
  AddSolveOptions(app, &o->tol, &o->max_iter);
  AddBetaOption(app, &o->problems);
  app.add_option("--patterns", o->patterns, "digits stored / samples per problem, up to 1797")
      ->check(IntIn(1, 1000000));
  AddSeedOption(app, &o->seed);
  app.add_option("--data", o->data, "digits.csv.gz, or a directory holding it")->default_str("")->check(PathCheck());
  app.add_option("--json", o->json, "write {\"settings\": ..., \"results\": [...]}, one result per (problem, solver)")
      ->check(PathCheck());
  app.add_option("--csv", o->csv, "write the table as CSV")->check(PathCheck());
  app.add_option("--plot", o->plot, "draw residual vs iteration and vs time (.png or .svg, needs gnuplot)")
      ->check(ExtensionCheck({".png", ".svg"}));
  app.add_flag("--quiet", o->quiet, "no progress line on stderr");
  app.add_option("--device", o->device,
                 "cpu, or cuda: the problems with a device map (hopfield-digits,\n"
                 "sparse-hopfield with alpha 2) on the GPU with the device solvers\n"
                 "(picard, anderson); the other runs are reported as skipped")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  if (!Parse(app, argc, argv) || !CheckProblemSelection(o->problems)) return false;
  ExpandAllSolvers(&o->solvers);
  for (const std::string& s : o->solvers) CheckSolverName(s);
  o->solver_options = ParseSolverOptions("--solver-options", o->solver_option_values);
  for (const auto& entry : o->solver_options)
    Require(std::find(o->solvers.begin(), o->solvers.end(), entry.first) != o->solvers.end(),
            "--solver-options: solver '" + entry.first + "' is not among --solvers");
  o->problems.settings.seed = static_cast<unsigned>(o->seed);
  CheckWritable(o->json, "--json");
  CheckWritable(o->csv, "--csv");
  CheckWritable(o->plot, "--plot");
  CheckDistinctFiles({{"--json", o->json}, {"--csv", o->csv}, {"--plot", o->plot}}, {{"--data", o->data}});
  return true;
}

struct Result : RunRecord {
  implicit::Summary summary;
};

long Total(const std::vector<int>& per_sample) {
  long total = 0;
  for (int v : per_sample) total += v;
  return total;
}

// Mean columns of f evaluated per sample (trial points included).
double EvaluationsPerSample(const implicit::Summary& s) {
  return s.num_samples() > 0 ? static_cast<double>(s.total_sample_evaluations()) / s.num_samples() : 0.0;
}

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

Json ResultJson(const Result& r) {
  Json o = RunJson(r);
  o["library"] = implicit::SolverLibrary(r.solver);
  if (!r.ran()) {
    o["message"] = r.message;
    o["converged_samples"] = 0;
    return o;
  }
  const implicit::Summary& s = r.summary;
  o["iterations"] = s.iterations;
  o["function_evaluations"] = s.function_evaluations;
  o["jacobian_products"] = s.jacobian_products;
  o["sample_evaluations"] = s.total_sample_evaluations();
  o["evaluations_per_sample"] = EvaluationsPerSample(s);
  o["accelerated_steps"] = Total(s.sample_accelerated_steps);
  o["backtracks"] = Total(s.sample_backtracks);
  o["fallbacks"] = Total(s.sample_fallbacks);
  o["residual"] = s.absolute_residual;
  o["relative_residual"] = s.relative_residual;
  o["seconds"] = s.wall_time_seconds;
  o["converged_samples"] = s.num_converged();
  o["message"] = s.message;
  Json& trace = o["trace"];
  for (const char* key : {"iteration", "seconds", "max_residual", "mean_residual"}) trace[key] = Json::array();
  for (const auto& t : s.trace) {
    trace["iteration"].push_back(t.iteration);
    trace["seconds"].push_back(t.seconds);
    trace["max_residual"].push_back(t.max_residual);
    trace["mean_residual"].push_back(t.mean_residual);
  }
  return o;
}

void WriteJson(const Options& o, const std::vector<Result>& results, const std::string& data_source) {
  Json settings;
  settings["tol"] = o.tol;
  settings["max_iter"] = o.max_iter;
  settings["beta"] = o.problems.settings.beta;
  settings["patterns"] = o.problems.settings.patterns;
  AddProblemParametersJson(o.problems.settings, &settings);
  settings["seed"] = o.seed;
  settings["data"] = data_source;
  settings["solver_options"] = o.solver_options;
  Json root;
  root["settings"] = settings;
  root["results"] = Json::array();
  for (const Result& r : results) root["results"].push_back(ResultJson(r));
  WriteJsonFile(o.json, root, "--json");
  std::cout << "json: " << o.json << "\n";
}

void WriteCsv(const std::string& path, const std::vector<Result>& results) {
  Table csv({"problem", "solver", "library", "status", "iterations", "function_evaluations", "jacobian_products", "residual",
             "seconds", "samples", "converged_samples", "message"});
  for (const Result& r : results) {
    const implicit::Summary& s = r.summary;
    auto cell = [&](const std::string& text) { return r.ran() ? text : std::string(); };
    csv.AddRow({r.problem, r.solver, implicit::SolverLibrary(r.solver), r.status, cell(std::to_string(s.iterations)),
                cell(std::to_string(s.function_evaluations)), cell(std::to_string(s.jacobian_products)),
                cell(FmtExact(s.absolute_residual)), cell(FmtExact(s.wall_time_seconds)), std::to_string(r.samples),
                r.ran() ? std::to_string(s.num_converged()) : "0", r.ran() ? s.message : r.message});
  }
  WriteTextFile(path, csv.Csv(), "--csv");
  std::cout << "csv: " << path << "\n";
}

// One gnuplot panel: `plots` against `xlabel`.
std::string Panel(const std::vector<std::string>& plots, const std::string& xlabel, const std::string& title) {
  std::string s = "set title " + GnuplotQuote(title) + "\nset xlabel " + GnuplotQuote(xlabel) +
                  "\nset ylabel 'max residual |f(z)-z|'\n";
  if (plots.empty()) return s + "set key off\nplot 1 notitle lc rgb 'white'\nset key on\n";
  return s + "plot " + JoinNames(plots) + "\n";
}

// Residual against iteration (left column) and against time (right), one row per problem.
void Plot(const std::string& path, const std::vector<std::string>& problems, const std::vector<Result>& results) {
  // One colour per solver in every panel (gnuplot's linetype k), in the order of first appearance.
  std::vector<std::string> solvers;
  for (const Result& r : results)
    if (std::find(solvers.begin(), solvers.end(), r.solver) == solvers.end()) solvers.push_back(r.solver);
  std::string data, left, right;
  int block = 0;
  for (const std::string& problem : problems) {
    std::vector<std::string> it_plots, time_plots;
    for (const Result& r : results) {
      if (r.problem != problem || !r.ran()) continue;
      std::vector<double> it, sec, res;
      for (const auto& t : r.summary.trace) {
        it.push_back(t.iteration);
        sec.push_back(t.seconds);
        res.push_back(t.max_residual);
      }
      // A run without a trace (a backend's sample-by-sample solve, a sharded
      // one) is drawn as its end point: the most iterations, the wall time,
      // the largest final residual.
      const bool end_only = it.empty();
      const double final_residual = r.summary.absolute_residual;
      if (end_only) {
        if (!(final_residual > 0.0) || !std::isfinite(final_residual)) continue;
        it.push_back(r.summary.iterations);
        sec.push_back(r.summary.wall_time_seconds);
        res.push_back(final_residual);
      }
      const std::string a = "it" + std::to_string(block), b = "t" + std::to_string(block);
      ++block;
      data += GnuplotData(a, it, res) + GnuplotData(b, sec, res, true);
      const long colour = 1 + (std::find(solvers.begin(), solvers.end(), r.solver) - solvers.begin());
      const std::string style = (end_only ? std::string(" with points pt 9 ps 1.2") : " with linespoints pt 7 ps 0.4") +
                                " lt " + std::to_string(colour) + " title " +
                                GnuplotQuote(r.solver + (end_only ? " (end)" : "")) + " noenhanced";
      it_plots.push_back("$" + a + style);
      time_plots.push_back("$" + b + style);
    }
    left += "unset logscale x\nset format x '%g'\n" + Panel(it_plots, "iteration", problem + ": residual vs iteration");
    right += "set logscale x\nset format x '10^{%T}'\n" +
             Panel(time_plots, "seconds (log scale)", problem + ": residual vs wall time");
  }
  const int rows = static_cast<int>(problems.size());
  // columnsfirst: all left panels, then all right panels.
  const std::string script = data + "set multiplot layout " + std::to_string(rows) + ",2 columnsfirst\n" +
                             "set logscale y\nset format y '10^{%T}'\nset grid\nset key outside right\n" + left +
                             right + "unset multiplot\n";
  RunGnuplot(script, path, 1200, std::max(320, 300 * rows));
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
