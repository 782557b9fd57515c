// implicit-compare's options: the Options its command line fills
// (ParseOptions: every flag, its checks and --help, and the checks of the
// solver names, --solver-options and the output files).
#pragma once

#include "common/solvers.h"
#include "problems/problem_options.h"

#include <string>
#include <vector>

namespace implicit_apps {

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
bool ParseOptions(int argc, char** argv, Options* o);

}  // namespace implicit_apps
