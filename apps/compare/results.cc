// implicit-compare's --json, --csv and --plot (compare/results.h).
#include "compare/results.h"

#include "common/format.h"
#include "common/gnuplot.h"
#include "common/json_output.h"
#include "common/output_files.h"
#include "common/solvers.h"
#include "common/table.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

long Total(const std::vector<int>& per_sample) {
  long total = 0;
  for (int v : per_sample) total += v;
  return total;
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

// One gnuplot panel: `plots` against `xlabel`.
std::string Panel(const std::vector<std::string>& plots, const std::string& xlabel, const std::string& title) {
  std::string s = "set title " + GnuplotQuote(title) + "\nset xlabel " + GnuplotQuote(xlabel) +
                  "\nset ylabel 'max residual |f(z)-z|'\n";
  if (plots.empty()) return s + "set key off\nplot 1 notitle lc rgb 'white'\nset key on\n";
  return s + "plot " + JoinNames(plots) + "\n";
}

}  // namespace

double EvaluationsPerSample(const implicit::Summary& s) {
  return s.num_samples() > 0 ? static_cast<double>(s.total_sample_evaluations()) / s.num_samples() : 0.0;
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

}  // namespace implicit_apps
