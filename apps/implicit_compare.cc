// implicit-compare: runs every selected forward solver on every selected
// built-in equilibrium problem and reports iterations, evaluations, residuals,
// time and converged samples as a table, JSON, CSV and a residual plot.
//
//   implicit-compare                                   # all solvers, all problems
//   implicit-compare --problem hopfield-digits --solvers picard,anderson --beta 2
//   implicit-compare --json out.json --csv out.csv --plot residuals.png
#include "common/app_util.h"
#include "common/problems.h"
#include "common/solvers.h"

#include <implicit/core/digits.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

const char* kUsage = R"(usage: implicit-compare [options]

Runs forward solvers on built-in equilibrium problems and compares them.

  --problem LIST      comma-separated problems (default: all)
                        hopfield-digits  modern Hopfield retrieval of digits (bottom half hidden)
                        sparse-hopfield  the same with the entmax (sparse) update
                        deq-tanh         z = tanh(W z + U x + b) with |W|_2 = --spectral-norm
                        rbm              RBM-effective energy on the digits
                        et-digits        Energy Transformer block on 2x2 digit patches
  --solvers LIST      comma-separated solver names (default: all registered)
  --tol X             absolute residual tolerance |f(z) - z| per sample (default 1e-8)
  --max-iter N        iteration budget per solve (default 200)
  --beta B            inverse temperature of the Hopfield-type problems (default 1)
  --patterns N        digits stored / samples per problem, 1..1797 (default 100)
  --alpha A           entmax order of sparse-hopfield, >= 1 (default 1.5)
  --spectral-norm S   |W|_2 of deq-tanh, in (0, 1) for a contraction (default 0.9)
  --et-step A         gradient step of et-digits' map z - A grad E, > 0 (default 0.5)
  --rbm-scale C       couplings of rbm, W = C x digits, > 0 (default 0.03)
  --rbm-p P           Bernoulli prior of rbm's hidden units, in (0, 1) (default 0.1)
  --seed N            seed of the random weights (default 1)
  --data PATH         digits.csv.gz, or a directory holding it
  --json PATH         write {"results": [...]} with one object per (problem, solver)
  --csv PATH          write the table as CSV
  --plot PATH         draw residual vs iteration and vs time (.png or .svg, needs gnuplot)
  --quiet             no progress line on stderr
  --help              this text
)";

const std::vector<std::string> kProblems = {"hopfield-digits", "sparse-hopfield", "deq-tanh",
                                            "et-digits", "rbm"};

struct Result {
  std::string problem, solver, status, message;
  implicit::Summary summary;
  bool skipped = false, failed = false;
  Index dimension = 0, samples = 0;
};

std::unique_ptr<Problem> MakeProblem(const std::string& name, const implicit::DigitsDataset& digits,
                                     const ProblemSettings& s) {
  if (name == "hopfield-digits") return std::make_unique<HopfieldDigitsProblem>(digits, s);
  if (name == "sparse-hopfield") return std::make_unique<SparseHopfieldProblem>(digits, s);
  if (name == "deq-tanh") return std::make_unique<DeqTanhProblem>(digits, s);
  if (name == "et-digits") return std::make_unique<EtDigitsProblem>(digits, s);
  if (name == "rbm") return std::make_unique<RbmProblem>(digits, s);
  throw UsageError("unknown problem '" + name + "' (available: " + JoinNames(kProblems) + ")");
}

long Total(const std::vector<int>& per_sample) {
  long total = 0;
  for (int v : per_sample) total += v;
  return total;
}

// Mean columns of f evaluated per sample (trial points included).
double EvaluationsPerSample(const implicit::Summary& s) {
  return s.num_samples() > 0
             ? static_cast<double>(s.total_sample_evaluations()) / s.num_samples()
             : 0.0;
}

JsonObject ResultJson(const Result& r) {
  JsonObject o;
  o.Set("problem", r.problem).Set("solver", r.solver).Set("status", r.status);
  o.Set("skipped", r.skipped);
  o.Set("dimension", static_cast<long>(r.dimension)).Set("samples", static_cast<long>(r.samples));
  if (r.skipped || r.failed) {
    o.Set("message", r.message);
    o.Set("converged_samples", 0);
    return o;
  }
  const implicit::Summary& s = r.summary;
  o.Set("iterations", s.iterations)
      .Set("function_evaluations", s.function_evaluations)
      .Set("jacobian_products", s.jacobian_products)
      .Set("sample_evaluations", static_cast<long>(s.total_sample_evaluations()))
      .Set("evaluations_per_sample", EvaluationsPerSample(s))
      .Set("accelerated_steps", Total(s.sample_accelerated_steps))
      .Set("backtracks", Total(s.sample_backtracks))
      .Set("fallbacks", Total(s.sample_fallbacks))
      .Set("residual", s.absolute_residual)
      .Set("relative_residual", s.relative_residual)
      .Set("seconds", s.wall_time_seconds)
      .Set("converged_samples", s.num_converged())
      .Set("message", s.message);
  std::vector<double> it, sec, res, mean;
  for (const auto& t : s.trace) {
    it.push_back(t.iteration);
    sec.push_back(t.seconds);
    res.push_back(t.max_residual);
    mean.push_back(t.mean_residual);
  }
  JsonObject trace;
  trace.Set("iteration", it).Set("seconds", sec).Set("max_residual", res).Set("mean_residual", mean);
  o.Set("trace", trace);
  return o;
}

void Plot(const std::string& path, const std::vector<std::string>& problems,
          const std::vector<Result>& results) {
  std::string data, script;
  int block = 0;
  const int rows = static_cast<int>(problems.size());
  script += "set multiplot layout " + std::to_string(rows) + ",2 columnsfirst\n" +
            std::string("set logscale y\nset format y '10^{%T}'\nset grid\nset key outside right\n");
  std::string left, right;
  // One colour per solver in every panel (gnuplot's linetype k), in the order of first appearance.
  std::vector<std::string> solvers;
  for (const Result& r : results)
    if (std::find(solvers.begin(), solvers.end(), r.solver) == solvers.end()) solvers.push_back(r.solver);
  for (const std::string& problem : problems) {
    std::vector<std::string> it_plots, time_plots;
    for (const Result& r : results) {
      if (r.problem != problem || r.skipped || r.failed || r.summary.trace.empty()) continue;
      std::vector<double> it, sec, res;
      for (const auto& t : r.summary.trace) {
        it.push_back(t.iteration);
        sec.push_back(t.seconds);
        res.push_back(t.max_residual);
      }
      const std::string a = "it" + std::to_string(block), b = "t" + std::to_string(block);
      ++block;
      data += GnuplotData(a, it, res) + GnuplotData(b, sec, res, true);
      const std::string style =
          " with linespoints pt 7 ps 0.4 lt " +
          std::to_string(1 + (std::find(solvers.begin(), solvers.end(), r.solver) - solvers.begin())) +
          " title " + GnuplotQuote(r.solver) + " noenhanced";
      it_plots.push_back("$" + a + style);
      time_plots.push_back("$" + b + style);
    }
    auto panel = [&](const std::vector<std::string>& plots, const std::string& xlabel,
                     const std::string& title) {
      std::string s = "set title " + GnuplotQuote(title) + "\nset xlabel " + GnuplotQuote(xlabel) +
                      "\nset ylabel 'max residual |f(z)-z|'\n";
      if (plots.empty()) return s + "set key off\nplot 1 notitle lc rgb 'white'\nset key on\n";
      s += "plot ";
      for (std::size_t i = 0; i < plots.size(); ++i) s += (i ? ", " : "") + plots[i];
      return s + "\n";
    };
    left += "unset logscale x\nset format x '%g'\n" + panel(it_plots, "iteration", problem + ": residual vs iteration");
    right += "set logscale x\nset format x '10^{%T}'\n" +
             panel(time_plots, "seconds (log scale)", problem + ": residual vs wall time");
  }
  // columnsfirst: all left panels, then all right panels.
  script = data + script + left + right + "unset multiplot\n";
  RunGnuplot(script, path, 1200, std::max(320, 300 * rows));
}

int Run(int argc, char** argv) {
  Args args(argc, argv, 1, {"quiet", "help"});
  if (args.Flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  const std::vector<std::string> problems = args.List("problem", kProblems);
  const std::vector<std::string> solvers = args.List("solvers", AvailableSolvers());
  const double tol = args.Double("tol", 1e-8);
  const long max_iter = args.Int("max-iter", 200);
  ProblemSettings settings;
  settings.beta = args.Double("beta", 1.0);
  const long patterns = args.Int("patterns", 100);
  settings.alpha = args.Double("alpha", 1.5);
  settings.spectral_norm = args.Double("spectral-norm", 0.9);
  settings.et_step = args.Double("et-step", 0.5);
  settings.rbm_scale = args.Double("rbm-scale", 0.03);
  settings.rbm_p = args.Double("rbm-p", 0.1);
  const long seed = args.Int("seed", 1);
  const std::string data_option = args.String("data");
  const std::string json_path = args.String("json"), csv_path = args.String("csv"),
                    plot_path = args.String("plot");
  const bool quiet = args.Flag("quiet");
  args.CheckNoneLeft();

  Args::Require(tol > 0, "--tol must be > 0, got " + Fmt(tol));
  Args::Require(max_iter >= 1 && max_iter <= 1000000, "--max-iter must be in 1..1000000, got " +
                                                          std::to_string(max_iter));
  Args::Require(settings.beta > 0, "--beta must be > 0, got " + Fmt(settings.beta));
  Args::Require(settings.alpha >= 1, "--alpha must be >= 1, got " + Fmt(settings.alpha));
  Args::Require(settings.spectral_norm > 0, "--spectral-norm must be > 0, got " + Fmt(settings.spectral_norm));
  Args::Require(seed >= 0, "--seed must be >= 0");
  Args::Require(settings.et_step > 0, "--et-step must be > 0, got " + Fmt(settings.et_step));
  Args::Require(settings.rbm_scale > 0, "--rbm-scale must be > 0, got " + Fmt(settings.rbm_scale));
  Args::Require(settings.rbm_p > 0 && settings.rbm_p < 1,
                "--rbm-p must be in (0, 1), got " + Fmt(settings.rbm_p));
  Args::Require(patterns >= 1, "--patterns must be >= 1, got " + std::to_string(patterns));
  Args::Require(plot_path.empty() || EndsWith(Lower(plot_path), ".png") || EndsWith(Lower(plot_path), ".svg"),
                "--plot must name a .png or .svg file, got '" + plot_path + "'");
  settings.seed = static_cast<unsigned>(seed);
  CheckWritable(json_path, "--json");
  CheckWritable(csv_path, "--csv");
  CheckWritable(plot_path, "--plot");
  for (const auto& p : problems) {
    bool known = false;
    for (const auto& k : kProblems) known |= k == p;
    if (!known) throw UsageError("unknown problem '" + p + "' (available: " + JoinNames(kProblems) + ")");
  }
  for (const auto& s : solvers) CheckSolverName(s);

  const implicit::DigitsDataset digits = implicit::LoadDigits(FindDigits(data_option));
  Args::Require(patterns <= digits.size(),
                "--patterns " + std::to_string(patterns) + " exceeds the " +
                    std::to_string(digits.size()) + " digits in " + digits.source);
  settings.patterns = static_cast<int>(patterns);

  Progress progress(!quiet, 1.0);
  std::vector<Result> results;
  const int total = static_cast<int>(problems.size() * solvers.size());
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& problem_name : problems) {
    std::unique_ptr<Problem> problem = MakeProblem(problem_name, digits, settings);
    if (!quiet) std::cerr << problem->name() << ": " << problem->description() << "\n";
    for (const std::string& solver_name : solvers) {
      Result r;
      r.problem = problem_name;
      r.solver = solver_name;
      r.dimension = problem->map().dimension();
      r.samples = problem->initial().cols();
      const std::string reason = SkipReason(solver_name, problem->map());
      if (!reason.empty()) {
        r.skipped = true;
        r.status = "skipped";
        r.message = reason;
        results.push_back(r);
        ++done;
        continue;
      }
      implicit::SolverOptions common;
      common.absolute_tolerance = tol;
      common.max_iterations = static_cast<int>(max_iter);
      common.record_trace = true;
      const std::string prefix = "[" + std::to_string(done + 1) + "/" + std::to_string(total) + "] " +
                                 problem_name + " / " + solver_name;
      common.callback = [&](const implicit::IterationSummary& it) {
        progress.Update(prefix + ": iteration " + std::to_string(it.iteration) + ", residual " +
                        Fmt(it.max_residual, 3) + ", " + std::to_string(it.num_converged) + "/" +
                        std::to_string(r.samples) + " converged");
        return implicit::CallbackReturnType::kContinue;
      };
      progress.Update(prefix + ": starting", true);
      try {
        std::unique_ptr<implicit::Solver<double>> solver = MakeSolver(solver_name, common);
        Matrix<double> z = problem->initial();
        r.summary = solver->Solve(problem->map(), z);
        r.status = implicit::TerminationTypeToString(r.summary.termination_type);
      } catch (const std::exception& e) {
        r.failed = true;
        r.status = implicit::TerminationTypeToString(implicit::TerminationType::kInvalidInput);
        r.message = e.what();
      }
      results.push_back(r);
      ++done;
    }
  }
  const double total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.Update("done: " + std::to_string(done) + " runs in " + FmtFixed(total_seconds, 2) + " s", true);
  progress.Done();

  Table table({"problem", "solver", "status", "iterations", "f evals", "evals/sample",
               "J products", "residual", "seconds", "converged"},
              {false, false, false, true, true, true, true, true, true, true});
  for (const Result& r : results) {
    if (r.skipped || r.failed) {
      table.AddRow({r.problem, r.solver, r.status, "-", "-", "-", "-", "-", "-",
                    "0/" + std::to_string(r.samples)});
      continue;
    }
    const implicit::Summary& s = r.summary;
    table.AddRow({r.problem, r.solver, r.status, std::to_string(s.iterations),
                  std::to_string(s.function_evaluations), FmtFixed(EvaluationsPerSample(s), 1),
                  std::to_string(s.jacobian_products),
                  Fmt(s.absolute_residual, 3), FmtFixed(s.wall_time_seconds, 3),
                  std::to_string(s.num_converged()) + "/" + std::to_string(s.num_samples())});
  }
  table.Print(std::cout);
  for (const Result& r : results) {
    if (r.skipped) std::cout << "skipped " << r.problem << " / " << r.solver << ": " << r.message << "\n";
    if (r.failed) std::cout << "failed " << r.problem << " / " << r.solver << ": " << r.message << "\n";
  }
  std::cout << "tolerance " << Fmt(tol) << " on |f(z) - z| per sample, at most " << max_iter
            << " iterations; total " << FmtFixed(total_seconds, 2) << " s\n";

  if (!json_path.empty()) {
    std::vector<JsonObject> list;
    for (const Result& r : results) list.push_back(ResultJson(r));
    JsonObject settings_json;
    settings_json.Set("tol", tol).Set("max_iter", max_iter).Set("beta", settings.beta)
        .Set("patterns", static_cast<long>(settings.patterns)).Set("alpha", settings.alpha)
        .Set("spectral_norm", settings.spectral_norm).Set("et_step", settings.et_step)
        .Set("rbm_scale", settings.rbm_scale).Set("rbm_p", settings.rbm_p).Set("seed", seed).Set("data", digits.source);
    JsonObject root;
    root.Set("settings", settings_json).Set("results", list);
    WriteTextFile(json_path, root.ToString() + "\n", "--json");
    std::cout << "json: " << json_path << "\n";
  }
  if (!csv_path.empty()) {
    Table csv({"problem", "solver", "status", "iterations", "function_evaluations",
               "jacobian_products", "residual", "seconds", "samples", "converged_samples", "message"});
    for (const Result& r : results) {
      const bool ran = !r.skipped && !r.failed;
      const implicit::Summary& s = r.summary;
      csv.AddRow({r.problem, r.solver, r.status, ran ? std::to_string(s.iterations) : "",
                  ran ? std::to_string(s.function_evaluations) : "",
                  ran ? std::to_string(s.jacobian_products) : "",
                  ran ? JsonNumber(s.absolute_residual) : "", ran ? JsonNumber(s.wall_time_seconds) : "",
                  std::to_string(r.samples), ran ? std::to_string(s.num_converged()) : "0",
                  ran ? s.message : r.message});
    }
    WriteTextFile(csv_path, csv.Csv(), "--csv");
    std::cout << "csv: " << csv_path << "\n";
  }
  if (!plot_path.empty()) {
    try {
      Plot(plot_path, problems, results);
      std::cout << "plot: " << plot_path << " (residual vs iteration and vs time, drawn with gnuplot)\n";
    } catch (const std::exception& e) {
      std::cout << "plot: not written: " << e.what() << "\n";
      std::cerr << "implicit-compare: warning: " << e.what() << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-compare", [&] { return implicit_apps::Run(argc, argv); });
}
