// implicit-bench: how far is each solver from the floor, on this machine?
//
// For each built-in problem it times the floor (the dense products one
// full-batch evaluation of the problem's map must do, FloorTiming in
// common/problems.h) and one full-batch map evaluation, then runs every
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
#include "common/app_util.h"
#include "common/problems.h"
#include "common/solvers.h"

#include <implicit/core/digits.h>

#include <Eigen/Core>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace implicit_apps {
namespace {

const char* kUsage = R"(usage: implicit-bench [options]

Times each problem's floor (the dense products, GEMMs, that one full-batch
evaluation of its map must do; median of --repeat runs) and one full-batch map
evaluation, then runs each solver to tolerance once and reports its wall time,
converged samples, evaluations and its time per sample-iteration as a multiple
of the floor's time per sample:
  x floor = (solve seconds / sample evaluations) / (floor seconds / B).

  --problem LIST      comma-separated problems (default: all)
                        hopfield-digits  modern Hopfield retrieval, floor X^T Z + X P
                        sparse-hopfield  the same with the entmax update, same floor
                        rbm              RBM-effective energy, floor W^T V + W S
                        deq-tanh         z = tanh(W z + U x + b), floor W Z
                        et-digits        Energy Transformer block; floor: an estimate
                                         of its GEMMs (see the notes it prints)
  --solvers LIST      comma-separated solver names, or "all" for every registered
                      one (default: all registered but newton, whose dense Jacobian
                      costs n Jacobian-vector products per iteration: one iteration
                      on the 1797 Hopfield queries alone takes longer than the
                      whole default run should)
  --patterns N        stored patterns = queries B of every problem, 1..1797
                      (default: 1797 = all digits for hopfield-digits,
                      sparse-hopfield and rbm; 500 for deq-tanh and et-digits)
  --beta B            inverse temperature of the Hopfield-type problems (default 2)
  --tol X             absolute residual tolerance |f(z) - z| per sample (default 1e-8)
  --max-iter N        iteration budget per solve (default 500)
  --time-limit S      stop a solve at the first iteration that ends after S
                      seconds, reported as user_abort with what had converged by
                      then; 0 = no limit (default 5)
  --repeat N          timed runs of each floor and map evaluation, 1..1000 (default 7)
  --threads N         threads for Eigen's matrix products (OpenMP builds only);
                      0 = Eigen's default, OMP_NUM_THREADS or all cores (default 0)
  --float             also build each problem in float: float floors, map times
                      and solves (tolerance --float-tol)
  --float-tol X       absolute tolerance of the float solves (default 1e-5)
  --seed N            seed of the random weights (default 1)
  --data PATH         digits.csv.gz, or a directory holding it
  --json PATH         write every number (machine, build flags, floors, results)
  --quiet             no progress lines on stderr
  --help              this text
)";

// The default solver list: every registered solver but newton (see kUsage).
std::vector<std::string> DefaultSolvers() {
  std::vector<std::string> names;
  for (const std::string& n : AvailableSolvers())
    if (n != "newton") names.push_back(n);
  return names;
}

const std::vector<std::string> kProblems = {"hopfield-digits", "sparse-hopfield", "rbm", "deq-tanh",
                                            "et-digits"};
// --patterns default per problem (see kUsage): the whole digits set for the
// Hopfield-type problems; deq-tanh and et-digits are not about the number of
// stored patterns, and et-digits' slowest solvers would take minutes at 1797.
long DefaultPatterns(const std::string& problem, long available) {
  if (problem == "deq-tanh" || problem == "et-digits") return std::min(500L, available);
  return available;
}

// ---- machine and build ------------------------------------------------------------
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        while (!m.empty() && m.front() == ' ') m.erase(m.begin());
        return m;
      }
    }
  }
  return "unknown";
}

struct BuildFlag {
  const char* name;
  bool defined;
};
// Macros seen when this file was compiled (the library and the apps are built
// with the same project flags; the maps' GEMMs are compiled here, from headers).
std::vector<BuildFlag> BuildFlags() {
  return {
    {"__OPTIMIZE__",
#ifdef __OPTIMIZE__
     true},
#else
     false},
#endif
    {"NDEBUG",
#ifdef NDEBUG
     true},
#else
     false},
#endif
    {"__SSE2__",
#ifdef __SSE2__
     true},
#else
     false},
#endif
    {"__AVX__",
#ifdef __AVX__
     true},
#else
     false},
#endif
    {"__AVX2__",
#ifdef __AVX2__
     true},
#else
     false},
#endif
    {"__FMA__",
#ifdef __FMA__
     true},
#else
     false},
#endif
    {"__AVX512F__",
#ifdef __AVX512F__
     true},
#else
     false},
#endif
    {"_OPENMP",
#ifdef _OPENMP
     true},
#else
     false},
#endif
    {"EIGEN_USE_BLAS",
#ifdef EIGEN_USE_BLAS
     true},
#else
     false},
#endif
    {"EIGEN_DONT_VECTORIZE",
#ifdef EIGEN_DONT_VECTORIZE
     true},
#else
     false},
#endif
  };
}

std::string CompilerVersion() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("gcc ") + __VERSION__;
#else
  return "unknown";
#endif
}

std::string EigenVersion() {
  return std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

// ---- measurements -------------------------------------------------------------------
struct FloorRow {
  std::string problem, precision;
  Index dimension = 0, samples = 0;
  FloorTiming floor;
  FloorTiming map;  // one full-batch evaluation of the map
};

struct Result {
  std::string problem, precision, solver, status, message;
  bool skipped = false, failed = false;
  Index dimension = 0, samples = 0;
  double tolerance = 0;
  int converged = 0, iterations = 0, function_evaluations = 0, jacobian_products = 0;
  long long sample_evaluations = 0;
  bool counted_per_sample = false;  // false: function_evaluations x B (the solver does not count)
  double seconds = 0, residual = std::numeric_limits<double>::quiet_NaN();
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

template <typename S>
Result RunSolver(const ProblemT<S>& problem, const std::string& solver_name, const std::string& precision,
                 double tol, long max_iter, double time_limit, const FloorTiming& floor) {
  Result r;
  r.problem = problem.name();
  r.precision = precision;
  r.solver = solver_name;
  r.dimension = problem.map().dimension();
  r.samples = problem.initial().cols();
  r.tolerance = tol;
  r.floor_seconds = floor.seconds;
  const std::string reason = SkipReason(solver_name, problem.map());
  if (!reason.empty()) {
    r.skipped = true;
    r.status = "skipped";
    r.message = reason;
    return r;
  }
  implicit::SolverOptions common;
  common.absolute_tolerance = tol;
  common.max_iterations = static_cast<int>(max_iter);
  common.record_trace = false;
  std::chrono::steady_clock::time_point start;
  if (time_limit > 0) {
    common.callback = [&start, time_limit](const implicit::IterationSummary&) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return elapsed > time_limit ? implicit::CallbackReturnType::kAbort
                                  : implicit::CallbackReturnType::kContinue;
    };
  }
  try {
    std::unique_ptr<implicit::Solver<S>> solver = MakeSolver<S>(solver_name, common);
    Matrix<S> z = problem.initial();
    start = std::chrono::steady_clock::now();
    const implicit::Summary s = solver->Solve(problem.map(), z);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.status = implicit::TerminationTypeToString(s.termination_type);
    r.message = s.message;
    r.converged = s.num_converged();
    r.iterations = s.iterations;
    r.function_evaluations = s.function_evaluations;
    r.jacobian_products = s.jacobian_products;
    r.residual = s.absolute_residual;
    r.counted_per_sample = !s.sample_evaluations.empty();
    r.sample_evaluations = r.counted_per_sample
                               ? s.total_sample_evaluations()
                               : static_cast<long long>(s.function_evaluations) * r.samples;
    if (r.sample_evaluations > 0) {
      r.seconds_per_sample_evaluation = r.seconds / static_cast<double>(r.sample_evaluations);
      r.ratio = r.seconds_per_sample_evaluation / (floor.seconds / static_cast<double>(r.samples));
    }
  } catch (const std::exception& e) {
    r.failed = true;
    r.status = implicit::TerminationTypeToString(implicit::TerminationType::kInvalidInput);
    r.message = e.what();
  }
  return r;
}

std::string Ms(double seconds) { return std::isfinite(seconds) ? Fmt(seconds * 1e3, 4) : "-"; }

JsonObject TimingJson(const FloorTiming& t) {
  JsonObject o;
  o.Set("products", t.products).Set("note", t.note).Set("flops", t.flops).Set("seconds", t.seconds);
  o.Set("gflops_per_second", t.flops > 0 && t.seconds > 0 ? t.flops / t.seconds * 1e-9
                                                           : std::numeric_limits<double>::quiet_NaN());
  o.Set("repetitions", t.samples);
  return o;
}

JsonObject ResultJson(const Result& r) {
  JsonObject o;
  o.Set("problem", r.problem).Set("precision", r.precision).Set("solver", r.solver).Set("status", r.status);
  o.Set("skipped", r.skipped);
  o.Set("dimension", static_cast<long>(r.dimension)).Set("samples", static_cast<long>(r.samples));
  o.Set("tolerance", r.tolerance);
  o.Set("converged_samples", r.converged);
  o.Set("floor_seconds", r.floor_seconds);
  if (r.skipped || r.failed) return o.Set("message", r.message);
  o.Set("iterations", r.iterations)
      .Set("function_evaluations", r.function_evaluations)
      .Set("jacobian_products", r.jacobian_products)
      .Set("sample_evaluations", static_cast<long>(r.sample_evaluations))
      .Set("evals_counted", r.counted_per_sample ? "per_sample" : "function_evaluations_x_B")
      .Set("seconds", r.seconds)
      .Set("seconds_per_sample_evaluation", r.seconds_per_sample_evaluation)
      .Set("ratio_to_floor", r.ratio)
      .Set("residual", r.residual)
      .Set("message", r.message);
  return o;
}

int Run(int argc, char** argv) {
  Args args(argc, argv, 1, {"quiet", "help", "float"});
  if (args.Flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  const std::vector<std::string> problems = args.List("problem", kProblems);
  std::vector<std::string> solvers = args.List("solvers", DefaultSolvers());
  if (solvers.size() == 1 && solvers[0] == "all") solvers = AvailableSolvers();
  const bool patterns_given = args.Has("patterns");
  const long patterns = args.Int("patterns", 1797);
  ProblemSettings settings;
  settings.beta = args.Double("beta", 2.0);
  const double tol = args.Double("tol", 1e-8);
  const long max_iter = args.Int("max-iter", 500);
  const double time_limit = args.Double("time-limit", 5.0);
  const long threads = args.Int("threads", 0);
  const long repeat = args.Int("repeat", 7);
  const bool with_float = args.Flag("float");
  const double float_tol = args.Double("float-tol", 1e-5);
  const long seed = args.Int("seed", 1);
  const std::string data_option = args.String("data");
  const std::string json_path = args.String("json");
  const bool quiet = args.Flag("quiet");
  args.CheckNoneLeft();

  Args::Require(patterns >= 1, "--patterns must be >= 1, got " + std::to_string(patterns));
  Args::Require(settings.beta > 0, "--beta must be > 0, got " + Fmt(settings.beta));
  Args::Require(tol > 0, "--tol must be > 0, got " + Fmt(tol));
  Args::Require(max_iter >= 1 && max_iter <= 1000000,
                "--max-iter must be in 1..1000000, got " + std::to_string(max_iter));
  Args::Require(time_limit >= 0, "--time-limit must be >= 0 (0 = none), got " + Fmt(time_limit));
  Args::Require(repeat >= 1 && repeat <= 1000, "--repeat must be in 1..1000, got " + std::to_string(repeat));
  Args::Require(threads >= 0 && threads <= 1024, "--threads must be in 0..1024 (0 = default), got " +
                                                     std::to_string(threads));
  Args::Require(float_tol > 0, "--float-tol must be > 0, got " + Fmt(float_tol));
  Args::Require(seed >= 0, "--seed must be >= 0, got " + std::to_string(seed));
  settings.seed = static_cast<unsigned>(seed);
  CheckWritable(json_path, "--json");
  for (const auto& p : problems) {
    if (std::find(kProblems.begin(), kProblems.end(), p) == kProblems.end())
      throw UsageError("unknown problem '" + p + "' (available: " + JoinNames(kProblems) + ")");
  }
  for (const auto& s : solvers) CheckSolverName(s);

  const implicit::DigitsDataset digits = implicit::LoadDigits(FindDigits(data_option));
  Args::Require(patterns <= digits.size(), "--patterns " + std::to_string(patterns) + " exceeds the " +
                                               std::to_string(digits.size()) + " digits in " + digits.source);

  if (threads > 0) Eigen::setNbThreads(static_cast<int>(threads));
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int usable = UsableCores();
  const std::vector<BuildFlag> flags = BuildFlags();
  std::string flag_text;
  for (const BuildFlag& f : flags) flag_text += std::string(flag_text.empty() ? "" : " ") + f.name + "=" + (f.defined ? "1" : "0");
  std::cout << "machine: " << cores << " cores (" << usable << " usable by this process), " << CpuModel() << "\n"
            << "build: " << CompilerVersion() << ", Eigen " << EigenVersion() << " (SIMD "
            << Eigen::SimdInstructionSetsInUse() << ", " << Eigen::nbThreads() << " thread(s)); "
            << flag_text << "\n";

  std::vector<FloorRow> floors;
  std::vector<Result> results;
  const std::vector<std::string> precisions = with_float ? std::vector<std::string>{"double", "float"}
                                                         : std::vector<std::string>{"double"};
  const int total = static_cast<int>(problems.size() * solvers.size() * precisions.size());
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  auto progress = [&](const std::string& text) {
    if (!quiet) std::cerr << text << std::endl;
  };
  for (const std::string& problem_name : problems) {
    ProblemSettings s = settings;
    s.patterns = static_cast<int>(patterns_given ? patterns : DefaultPatterns(problem_name, digits.size()));
    for (const std::string& precision : precisions) {
      auto run = [&](const auto& problem) {
        if (precision == "double") progress(problem->name() + ": " + problem->description());
        FloorRow row;
        row.problem = problem_name;
        row.precision = precision;
        row.dimension = problem->map().dimension();
        row.samples = problem->initial().cols();
        progress(problem_name + " (" + precision + "): timing the floor and the map, " +
                 std::to_string(repeat) + " runs each");
        row.floor = problem->MeasureFloor(static_cast<int>(repeat));
        row.map = TimeMap(*problem, static_cast<int>(repeat));
        floors.push_back(row);
        for (const std::string& solver_name : solvers) {
          progress("[" + std::to_string(++done) + "/" + std::to_string(total) + "] " + problem_name + " / " +
                   solver_name + " (" + precision + ")");
          results.push_back(RunSolver(*problem, solver_name, precision, precision == "float" ? float_tol : tol,
                                      max_iter, time_limit, row.floor));
        }
      };
      if (precision == "double") {
        run(MakeProblemOf<double>(problem_name, digits, s));
      } else {
        run(MakeProblemOf<float>(problem_name, digits, s));
      }
    }
  }
  const double total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // ---- floors ----
  std::cout << "\nfloors (median of " << repeat << " runs; map = one full-batch evaluation of f)\n";
  Table floor_table({"problem", "type", "n", "B", "GFLOP", "floor ms", "GFLOP/s", "map ms", "map/floor"},
                    {false, false, true, true, true, true, true, true, true});
  for (const FloorRow& f : floors) {
    floor_table.AddRow({f.problem, f.precision, std::to_string(f.dimension), std::to_string(f.samples),
                        Fmt(f.floor.flops * 1e-9, 3), Ms(f.floor.seconds),
                        Fmt(f.floor.flops / f.floor.seconds * 1e-9, 3), Ms(f.map.seconds),
                        Fmt(f.map.seconds / f.floor.seconds, 3)});
  }
  floor_table.Print(std::cout);
  for (const std::string& problem_name : problems) {
    for (const FloorRow& f : floors) {
      if (f.problem != problem_name) continue;
      std::cout << "  " << f.problem << ": " << f.floor.products << "\n    " << f.floor.note << "\n";
      break;
    }
  }

  // ---- solves ----
  std::cout << "\nsolves (one run each; x floor = (seconds / sample evals) / (floor seconds / B))\n";
  std::vector<std::string> header = {"problem", "solver", "status", "converged", "iterations", "f evals",
                                     "sample evals", "evals counted", "seconds", "x floor"};
  std::vector<bool> right = {false, false, false, true, true, true, true, false, true, true};
  if (with_float) {
    header.insert(header.begin() + 1, "type");
    right.insert(right.begin() + 1, false);
  }
  Table table(header, right);
  bool any_fallback = false;
  for (const Result& r : results) {
    std::vector<std::string> row;
    if (r.skipped || r.failed) {
      row = {r.problem, r.solver, r.status, "-", "-", "-", "-", "-", "-", "-"};
    } else {
      any_fallback |= !r.counted_per_sample;
      row = {r.problem,
             r.solver,
             r.status,
             std::to_string(r.converged) + "/" + std::to_string(r.samples),
             std::to_string(r.iterations),
             std::to_string(r.function_evaluations),
             std::to_string(r.sample_evaluations),
             r.counted_per_sample ? "per sample" : "f evals x B",
             Fmt(r.seconds, 3),
             Fmt(r.ratio, 3)};
    }
    if (with_float) row.insert(row.begin() + 1, r.precision);
    table.AddRow(row);
  }
  table.Print(std::cout);
  std::set<std::string> reported;  // a skip once, not once per precision
  for (const Result& r : results) {
    const std::string what = r.problem + " / " + r.solver;
    if (r.skipped && reported.insert(what).second) std::cout << "skipped " << what << ": " << r.message << "\n";
    if (r.failed) std::cout << "failed " << what << " (" << r.precision << "): " << r.message << "\n";
  }
  if (any_fallback)
    std::cout << "evals counted \"f evals x B\": the solver reports no per-sample counts, so every batch "
                 "evaluation is counted as B sample evaluations\n";
  std::cout << "tolerance " << Fmt(tol) << (with_float ? " (float: " + Fmt(float_tol) + ")" : std::string())
            << " on |f(z) - z| per sample, at most " << max_iter << " iterations"
            << (time_limit > 0 ? ", at most " + Fmt(time_limit) + " s per solve (then user_abort)" : std::string())
            << "; Jacobian products (newton) are not in the sample evaluations; total "
            << FmtFixed(total_seconds, 2) << " s\n";

  if (!json_path.empty()) {
    JsonObject machine;
    machine.Set("cores", cores).Set("usable_cores", usable).Set("cpu", CpuModel());
    JsonObject build;
    build.Set("compiler", CompilerVersion()).Set("eigen", EigenVersion())
        .Set("eigen_simd", std::string(Eigen::SimdInstructionSetsInUse()))
        .Set("eigen_threads", Eigen::nbThreads());
    for (const BuildFlag& f : flags) build.Set(f.name, f.defined);
    JsonObject settings_json;
    settings_json.Set("problems", JoinNames(problems)).Set("solvers", JoinNames(solvers));
    settings_json.Raw("patterns", patterns_given ? std::to_string(patterns) : "null")
        .Set("patterns_default", "1797 (hopfield-digits, sparse-hopfield, rbm), 500 (deq-tanh, et-digits)")
        .Set("beta", settings.beta).Set("tol", tol).Set("float_tol", float_tol).Set("max_iter", max_iter)
        .Set("time_limit", time_limit).Set("threads", threads).Set("repeat", repeat).Set("float", with_float).Set("seed", seed)
        .Set("data", digits.source);
    std::vector<JsonObject> floor_list, result_list;
    for (const FloorRow& f : floors) {
      JsonObject o;
      o.Set("problem", f.problem).Set("precision", f.precision)
          .Set("dimension", static_cast<long>(f.dimension)).Set("samples", static_cast<long>(f.samples))
          .Set("floor", TimingJson(f.floor)).Set("map", TimingJson(f.map));
      floor_list.push_back(o);
    }
    for (const Result& r : results) result_list.push_back(ResultJson(r));
    JsonObject root;
    root.Set("machine", machine).Set("build", build).Set("settings", settings_json)
        .Set("floors", floor_list).Set("results", result_list).Set("total_seconds", total_seconds);
    WriteTextFile(json_path, root.ToString() + "\n", "--json");
    std::cout << "json: " << json_path << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-bench", [&] { return implicit_apps::Run(argc, argv); });
}
