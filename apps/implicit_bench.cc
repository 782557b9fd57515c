// implicit-bench: how far is each solver from the floor, on this machine?
//
// For each built-in problem it times the floor (the dense products one
// full-batch evaluation of the problem's map must do, FloorTiming in
// apps/problems/floor.h) and one full-batch map evaluation, then runs every
// selected solver to tolerance and reports the time per sample-iteration as a
// multiple of the floor's time per sample:
//
//   ratio = (solve seconds / sample evaluations) / (floor seconds / B)
//
// where sample evaluations = columns of f evaluated over the solve
// (Summary::total_sample_evaluations(); function_evaluations x B when a
// solver does not count them). Everything is measured in the same run on the
// same machine; nothing is compared against numbers from elsewhere.
//
//   implicit-bench                                     # the default run (about 1-2 min, 2 cores)
//   implicit-bench --problem hopfield-digits --solvers picard,anderson --float --json bench.json
//   implicit-bench --problem hopfield-digits --solvers anderson --mixed  # float, then double
//   implicit-bench --autodiff                          # user energies' derivatives (bench/autodiff_bench.h)
//   implicit-bench --graph-et                          # the graph ET's products per edge (bench/graph_bench.h)
//   implicit-bench --device cuda                       # the solves on the GPU (bench/cuda_bench.h)
//   implicit-bench --sweep                             # accelerated solvers against Picard on random maps
//
// The parts are in bench/: bench_options (the command line), machine (what
// the report says of the machine and the build), and the other benchmarks
// (autodiff_bench, graph_bench, cuda_bench); this file measures the problems'
// floors and solves and reports them.
#include "bench/bench_options.h"
#include "bench/machine.h"
#include "common/data_paths.h"
#include "common/format.h"
#include "common/json_output.h"
#include "common/output_files.h"
#include "common/solvers.h"
#include "common/table.h"
#include "problems/problem_options.h"
#include "problems/problem_run.h"
#include "problems/random_maps.h"

#include <implicit/core/digits.h>
#include <implicit/solvers/mixed_precision.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

// ---- measurements -------------------------------------------------------------------
struct FloorRow {
  std::string problem, precision;
  Index dimension = 0, samples = 0;
  FloorTiming floor;
  FloorTiming map;  // one full-batch evaluation of the map
};

struct Result : RunRecord {
  std::string precision;
  double tolerance = 0;
  int converged = 0, iterations = 0, function_evaluations = 0, jacobian_products = 0;
  long long sample_evaluations = 0;
  bool counted_per_sample = false;  // false: function_evaluations x B (the solver does not count)
  double seconds = 0, residual = std::numeric_limits<double>::quiet_NaN();
  double first_seconds = std::numeric_limits<double>::quiet_NaN();  // the first of --solves K solves
  double floor_seconds = std::numeric_limits<double>::quiet_NaN();
  double seconds_per_sample_evaluation = std::numeric_limits<double>::quiet_NaN();
  double ratio = std::numeric_limits<double>::quiet_NaN();
};

template <typename S>
FloorTiming TimeMap(const ProblemT<S>& problem, int repeats) {
  const Matrix<S>& z = problem.initial();
  Matrix<S> out(z.rows(), z.cols());
  return TimeFloor("f(Z), " + Shape(z.rows(), z.cols()), "one full-batch evaluation of the map",
                   0.0, repeats, [&] {
                     problem.map().Evaluate(z, out);
                     return static_cast<double>(out(0, 0));
                   });
}

// Solver options at `tol` whose callback aborts a solve once `time_limit`
// seconds (0: no limit) have passed since *start.
implicit::SolverOptions TimedOptions(double tol, long max_iter, double time_limit,
                                     const std::chrono::steady_clock::time_point* start) {
  implicit::SolverOptions options = RunOptions(tol, max_iter, false);
  if (time_limit > 0) {
    options.callback = [start, time_limit](const implicit::IterationSummary&) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
      return elapsed > time_limit ? implicit::CallbackReturnType::kAbort : implicit::CallbackReturnType::kContinue;
    };
  }
  return options;
}

// A solve's verdict and counts into r: those of `s`, with the counts of
// `first_stage` (a mixed solve's float stage) added when there is one.
void Record(const implicit::Summary& s, const implicit::Summary* first_stage, double seconds,
            const FloorTiming& floor, Result* r) {
  const implicit::Summary none;
  const implicit::Summary& first = first_stage != nullptr ? *first_stage : none;
  r->seconds = seconds;
  r->status = implicit::TerminationTypeToString(s.termination_type);
  r->message = s.message;
  r->converged = s.num_converged();
  r->iterations = first.iterations + s.iterations;
  r->function_evaluations = first.function_evaluations + s.function_evaluations;
  r->jacobian_products = first.jacobian_products + s.jacobian_products;
  r->residual = s.absolute_residual;
  r->counted_per_sample = !s.sample_evaluations.empty() && (first_stage == nullptr || !first.sample_evaluations.empty());
  r->sample_evaluations = r->counted_per_sample
                              ? first.total_sample_evaluations() + s.total_sample_evaluations()
                              : static_cast<long long>(r->function_evaluations) * r->samples;
  if (r->sample_evaluations > 0) {
    r->seconds_per_sample_evaluation = r->seconds / static_cast<double>(r->sample_evaluations);
    r->ratio = r->seconds_per_sample_evaluation / (floor.seconds / static_cast<double>(r->samples));
  }
}

// `solves` solves by one solver object from the problem's initial state; the
// last is recorded (the first's time kept in first_seconds). A later solve
// that takes other steps than the first is a failure: a solver's result must
// not depend on its earlier solves.
template <typename S>
Result RunSolver(const ProblemT<S>& problem, const std::string& solver_name, const std::string& precision,
                 double tol, long max_iter, double time_limit, long solves, const FloorTiming& floor) {
  Result r;
  StartRun(problem, solver_name, &r);
  r.precision = precision;
  r.tolerance = tol;
  r.floor_seconds = floor.seconds;
  if (r.skipped) return r;
  std::chrono::steady_clock::time_point start;
  try {
    std::unique_ptr<implicit::Solver<S>> solver =
        MakeSolver<S>(solver_name, TimedOptions(tol, max_iter, time_limit, &start));
    implicit::Summary first;
    for (long k = 0; k < solves; ++k) {
      Matrix<S> z = problem.initial();
      start = std::chrono::steady_clock::now();
      const implicit::Summary s = solver->Solve(problem.map(), z);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (k == 0) {
        first = s;
        r.first_seconds = seconds;
      } else if (s.termination_type != implicit::TerminationType::kUserAbort &&
                 s.sample_evaluations != first.sample_evaluations) {
        throw std::logic_error("solve " + std::to_string(k + 1) + " of one solver object took other steps than "
                               "its first");
      }
      if (k + 1 == solves) Record(s, nullptr, seconds, floor, &r);
    }
  } catch (const std::exception& e) {
    r.Fail(e);
  }
  return r;
}

// One solver as SolveMixedPrecision: in float on the float problem to
// mixed_tol, then in double on the double problem to tol, from the double
// problem's initial state. Counts are both stages' sums (a float evaluation
// counts as one), the verdict and residual the double stage's, and x floor
// is against the double floor.
Result RunMixed(const ProblemT<double>& problem, const ProblemT<float>& single, const std::string& solver_name,
                const Options& o, const FloorTiming& floor) {
  Result r;
  StartRun(problem, solver_name, &r);
  r.precision = "mixed";
  r.tolerance = o.tol;
  r.floor_seconds = floor.seconds;
  if (r.skipped) return r;
  std::chrono::steady_clock::time_point start;
  try {
    const auto coarse = MakeSolver<float>(solver_name, TimedOptions(o.mixed_tol, o.max_iter, o.time_limit, &start));
    const auto fine = MakeSolver<double>(solver_name, TimedOptions(o.tol, o.max_iter, o.time_limit, &start));
    Matrix<double> z = problem.initial();
    start = std::chrono::steady_clock::now();
    const implicit::MixedPrecisionSummary s =
        implicit::SolveMixedPrecision(*coarse, single.map(), *fine, problem.map(), z);
    Record(s.full, &s.single, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
           floor, &r);
    r.message = "float stage: " + std::to_string(s.single.iterations) + " iterations, " +
                std::to_string(s.single.num_converged()) + " converged to " + Fmt(o.mixed_tol) + "; " +
                s.full.message;
  } catch (const std::exception& e) {
    r.Fail(e);
  }
  return r;
}

std::string Ms(double seconds) { return std::isfinite(seconds) ? Fmt(seconds * 1e3, 4) : "-"; }

Json TimingJson(const FloorTiming& t) {
  Json o;
  o["products"] = t.products;
  o["note"] = t.note;
  o["flops"] = t.flops;
  o["seconds"] = t.seconds;
  o["gflops_per_second"] =
      t.flops > 0 && t.seconds > 0 ? t.flops / t.seconds * 1e-9 : std::numeric_limits<double>::quiet_NaN();
  o["repetitions"] = t.samples;
  return o;
}

Json ResultJson(const Result& r) {
  Json o = RunJson(r);
  o["precision"] = r.precision;
  o["tolerance"] = r.tolerance;
  o["converged_samples"] = r.converged;
  o["floor_seconds"] = r.floor_seconds;
  if (r.ran()) {
    o["iterations"] = r.iterations;
    o["function_evaluations"] = r.function_evaluations;
    o["jacobian_products"] = r.jacobian_products;
    o["sample_evaluations"] = r.sample_evaluations;
    o["evals_counted"] = r.counted_per_sample ? "per_sample" : "function_evaluations_x_B";
    o["seconds"] = r.seconds;
    o["first_solve_seconds"] = r.first_seconds;
    o["seconds_per_sample_evaluation"] = r.seconds_per_sample_evaluation;
    o["ratio_to_floor"] = r.ratio;
    o["residual"] = r.residual;
  }
  o["message"] = r.message;
  return o;
}

struct Measurements {
  std::vector<FloorRow> floors;
  std::vector<Result> results;
  double seconds = 0;
};

// The floor, the map and every solver on one problem in one precision.
template <typename S>
void MeasureProblem(const Options& o, const ProblemT<S>& problem, const std::string& precision, Measurements* m,
                    int* done, int total) {
  auto progress = [&](const std::string& text) {
    if (!o.quiet) std::cerr << text << std::endl;
  };
  if (precision == "double") progress(problem.name() + ": " + problem.description());
  FloorRow row;
  row.problem = problem.name();
  row.precision = precision;
  row.dimension = problem.map().dimension();
  row.samples = problem.initial().cols();
  progress(row.problem + " (" + precision + "): timing the floor and the map, " + std::to_string(o.repeat) +
           " runs each");
  row.floor = problem.MeasureFloor(static_cast<int>(o.repeat));
  row.map = TimeMap(problem, static_cast<int>(o.repeat));
  m->floors.push_back(row);
  for (const std::string& solver_name : o.solvers) {
    progress("[" + std::to_string(++*done) + "/" + std::to_string(total) + "] " + row.problem + " / " +
             solver_name + " (" + precision + ")");
    m->results.push_back(RunSolver(problem, solver_name, precision, precision == "float" ? o.float_tol : o.tol,
                                   o.max_iter, o.time_limit, o.solves, row.floor));
  }
}

// The settings of the problem `name`: --patterns or the problem's default.
ProblemSettings ProblemSettingsFor(const Options& o, const std::string& name, const implicit::DigitsDataset& digits) {
  ProblemSettings s = o.problems.settings;
  s.patterns = static_cast<int>(o.patterns > 0 ? o.patterns : DefaultPatterns(name, digits.size()));
  return s;
}

Measurements MeasureAll(const Options& o, const implicit::DigitsDataset& digits) {
  Measurements m;
  const int total =
      static_cast<int>(o.problems.names.size() * o.solvers.size() * (1 + (o.with_float ? 1 : 0) + (o.mixed ? 1 : 0)));
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& problem_name : o.problems.names) {
    const ProblemSettings s = ProblemSettingsFor(o, problem_name, digits);
    const auto problem = MakeProblemOf<double>(problem_name, digits, s);
    MeasureProblem(o, *problem, "double", &m, &done, total);
    if (!o.with_float && !o.mixed) continue;
    const auto single = MakeProblemOf<float>(problem_name, digits, s);
    if (o.with_float) MeasureProblem(o, *single, "float", &m, &done, total);
    if (!o.mixed) continue;
    const FloorTiming& floor = m.floors[m.floors.size() - (o.with_float ? 2 : 1)].floor;  // the double one
    for (const std::string& solver_name : o.solvers) {
      if (!o.quiet)
        std::cerr << "[" << ++done << "/" << total << "] " << problem_name << " / " << solver_name << " (mixed)\n";
      m.results.push_back(RunMixed(*problem, *single, solver_name, o, floor));
    }
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

void PrintFloors(const Options& o, const std::vector<FloorRow>& floors) {
  std::cout << "\nfloors (median of " << o.repeat << " runs; map = one full-batch evaluation of f)\n";
  Table table({"problem", "type", "n", "B", "GFLOP", "floor ms", "GFLOP/s", "map ms", "map/floor"},
              {false, false, true, true, true, true, true, true, true});
  for (const FloorRow& f : floors) {
    table.AddRow({f.problem, f.precision, std::to_string(f.dimension), std::to_string(f.samples),
                  Fmt(f.floor.flops * 1e-9, 3), Ms(f.floor.seconds), Fmt(f.floor.flops / f.floor.seconds * 1e-9, 3),
                  Ms(f.map.seconds), Fmt(f.map.seconds / f.floor.seconds, 3)});
  }
  table.Print(std::cout);
  for (const std::string& problem_name : o.problems.names) {
    for (const FloorRow& f : floors) {
      if (f.problem != problem_name) continue;
      std::cout << "  " << f.problem << ": " << f.floor.products << "\n    " << f.floor.note << "\n";
      break;
    }
  }
}

// The table row of one solve (with a type column when float or mixed runs too).
std::vector<std::string> ResultRow(const Result& r, bool with_precision) {
  std::vector<std::string> row;
  if (!r.ran()) {
    row = {r.problem, r.solver, r.status, "-", "-", "-", "-", "-", "-", "-"};
  } else {
    row = {r.problem, r.solver, r.status, std::to_string(r.converged) + "/" + std::to_string(r.samples),
           std::to_string(r.iterations), std::to_string(r.function_evaluations),
           std::to_string(r.sample_evaluations), r.counted_per_sample ? "per sample" : "f evals x B",
           Fmt(r.seconds, 3), Fmt(r.ratio, 3)};
  }
  if (with_precision) row.insert(row.begin() + 1, r.precision);
  return row;
}

void PrintResults(const Options& o, const Measurements& m) {
  std::cout << "\nsolves ("
            << (o.solves > 1 ? "the last of " + std::to_string(o.solves) + " by one solver object" : "one run each")
            << "; x floor = (seconds / sample evals) / (floor seconds / B))\n";
  std::vector<std::string> header = {"problem", "solver", "status", "converged", "iterations", "f evals",
                                     "sample evals", "evals counted", "seconds", "x floor"};
  std::vector<bool> right = {false, false, false, true, true, true, true, false, true, true};
  const bool with_precision = o.with_float || o.mixed;
  if (with_precision) {
    header.insert(header.begin() + 1, "type");
    right.insert(right.begin() + 1, false);
  }
  Table table(header, right);
  bool any_fallback = false;
  for (const Result& r : m.results) {
    any_fallback |= r.ran() && !r.counted_per_sample;
    table.AddRow(ResultRow(r, with_precision));
  }
  table.Print(std::cout);
  std::set<std::string> reported;  // a skip once, not once per precision
  for (const Result& r : m.results) {
    const std::string what = r.problem + " / " + r.solver;
    if (r.skipped && reported.insert(what).second) std::cout << "skipped " << what << ": " << r.message << "\n";
    if (r.failed) std::cout << "failed " << what << " (" << r.precision << "): " << r.message << "\n";
  }
  if (any_fallback)
    std::cout << "evals counted \"f evals x B\": the solver reports no per-sample counts, so every batch "
                 "evaluation is counted as B sample evaluations\n";
  std::cout << "tolerance " << Fmt(o.tol) << (o.with_float ? " (float: " + Fmt(o.float_tol) + ")" : std::string())
            << (o.mixed ? " (mixed: float stage to " + Fmt(o.mixed_tol) + ", then double; counts of both stages)"
                        : std::string())
            << " on |f(z) - z| per sample, at most " << o.max_iter << " iterations"
            << (o.time_limit > 0 ? ", at most " + Fmt(o.time_limit) + " s per solve (then user_abort)" : std::string())
            << "; Jacobian products (newton) are not in the sample evaluations; total " << FmtFixed(m.seconds, 2)
            << " s\n";
}

Json SettingsJson(const Options& o, const std::string& data_source) {
  Json s;
  s["problems"] = JoinNames(o.problems.names);
  s["solvers"] = JoinNames(o.solvers);
  s["patterns"] = o.patterns > 0 ? Json(o.patterns) : Json(nullptr);
  s["patterns_default"] = PatternsDefaultText();
  s["beta"] = o.problems.settings.beta;
  AddProblemParametersJson(o.problems.settings, &s);
  s["tol"] = o.tol;
  s["float_tol"] = o.float_tol;
  s["max_iter"] = o.max_iter;
  s["time_limit"] = o.time_limit;
  s["threads"] = o.threads;
  s["repeat"] = o.repeat;
  s["solves"] = o.solves;
  s["float"] = o.with_float;
  s["mixed"] = o.mixed;
  s["mixed_tol"] = o.mixed_tol;
  s["seed"] = o.seed;
  s["data"] = data_source;
  return s;
}

void WriteJson(const Options& o, const Measurements& m, const std::string& data_source) {
  Json root;
  MachineJson(&root);
  root["settings"] = SettingsJson(o, data_source);
  root["floors"] = Json::array();
  for (const FloorRow& f : m.floors) {
    root["floors"].push_back({{"problem", f.problem}, {"precision", f.precision}, {"dimension", f.dimension},
                              {"samples", f.samples}, {"floor", TimingJson(f.floor)}, {"map", TimingJson(f.map)}});
  }
  root["results"] = Json::array();
  for (const Result& r : m.results) root["results"].push_back(ResultJson(r));
  root["total_seconds"] = m.seconds;
  WriteJsonFile(o.json, root, "--json");
  std::cout << "json: " << o.json << "\n";
}

// --json of the --autodiff and --device cuda runs: their results as they are.
int WriteResults(const std::string& json, const Json& results) {
  Outputs outputs;
  outputs.Write("--json", json, [&] {
    WriteJsonFile(json, results, "--json");
    std::cout << "json: " << json << "\n";
  });
  outputs.Finish();
  return 0;
}

// --sweep: the table, and with --json every row.
int RunSweepBench(const Options& o) {
  const SweepResult r = RunSweep(MakeRandomMaps(o.sweep_settings), o.sweep_solvers, o.sweep_settings);
  std::cout << SweepTable(r);
  Json rows = Json::array();
  for (const SweepRow& row : r.rows) {
    rows.push_back({{"solver", row.solver}, {"samples", row.samples}, {"converged", row.converged},
                    {"lost", row.lost}, {"evaluations", row.evaluations},
                    {"maps_more_than_picard", row.maps_more_than_picard}, {"seconds", row.seconds},
                    {"map_evaluations", row.map_evaluations}, {"lost_at", row.lost_at}});
  }
  const SweepSettings& s = r.settings;
  return WriteResults(o.json, {{"sweep", {{"maps", s.maps}, {"batch", s.batch}, {"seed", s.seed},
                                          {"tolerance", s.tolerance}, {"max_iterations", s.max_iterations},
                                          {"families", r.families}, {"rows", rows}}}});
}

int Run(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 0;
  if (o.sweep) return RunSweepBench(o);
  if (o.autodiff) return WriteResults(o.json, RunAutodiffBench(o.autodiff_options));
  if (o.graph_et) {
    if (o.threads > 0) Eigen::setNbThreads(static_cast<int>(o.threads));
    return WriteResults(o.json, RunGraphBench(o.graph_options));
  }
  const implicit::DigitsDataset digits = LoadDigitsOption(o.data);
  if (o.device == "cuda") {
    if (o.threads > 0) Eigen::setNbThreads(static_cast<int>(o.threads));
    return WriteResults(o.json, RunDeviceBench(o.device_options, digits));
  }
  Require(o.patterns <= digits.size(), "--patterns: " + std::to_string(o.patterns) + " exceeds the " +
                                           std::to_string(digits.size()) + " digits in " + digits.source);
  for (const std::string& name : o.problems.names)
    CheckFiniteSettings(name, digits, ProblemSettingsFor(o, name, digits), o.with_float || o.mixed);
  if (o.threads > 0) Eigen::setNbThreads(static_cast<int>(o.threads));
  PrintMachine();
  const Measurements m = MeasureAll(o, digits);
  PrintFloors(o, m.floors);
  PrintResults(o, m);
  Outputs outputs;
  outputs.Write("--json", o.json, [&] { WriteJson(o, m, digits.source); });
  outputs.Finish();
  return 0;
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-bench", [&] { return implicit_apps::Run(argc, argv); });
}
