// implicit-bench's command line: the Options it fills (ParseOptions: every
// flag, its checks and --help), the default solver list and the default
// --patterns of each problem.
#pragma once

#include "bench/autodiff_bench.h"
#include "bench/cuda_bench.h"
#include "bench/graph_bench.h"
#include "problems/problem_options.h"
#include "problems/random_maps.h"

#include <string>
#include <vector>

namespace implicit_apps {

// The default solver list: libimplicit's solvers but newton, whose dense
// Jacobian costs n Jacobian-vector products per iteration: one iteration on
// the 1797 Hopfield queries alone takes longer than the whole default run
// should.
std::vector<std::string> DefaultSolvers();


// --patterns default per problem: the whole digits set, or the problem's
// bench_patterns (deq-tanh and et-digits are not about the number of stored
long DefaultPatterns(const std::string& problem, long available);

// The --patterns default as the help and the JSON settings show it.
std::string PatternsDefaultText();

struct Options {
  ProblemSelection problems;
  std::vector<std::string> solvers = DefaultSolvers();
  long patterns = 0;  // 0: each problem's default
  double tol = 1e-8, time_limit = 5.0, float_tol = 1e-5, mixed_tol = 1e-4;
  long max_iter = 500, threads = 0, repeat = 7, seed = 1;
  long solves = 1;  // solves of each problem by one solver object; the last is reported
  bool mixed = false;  // also each solver as SolveMixedPrecision (float to mixed_tol, then double)
  bool with_float = false, quiet = false, autodiff = false, graph_et = false, sweep = false;
  SweepSettings sweep_settings;
  std::vector<std::string> sweep_solvers = {"anderson", "broyden"};
  AutodiffBenchOptions autodiff_options;
  GraphBenchOptions graph_options;
  std::string device = "cpu";
  DeviceBenchOptions device_options;
  std::string data, json;
};

// The command line into `o`; false when it asked for --help or --list-problems.
bool ParseOptions(int argc, char** argv, Options* o);

}  // namespace implicit_apps
