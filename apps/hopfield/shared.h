// What the subcommands of implicit-hopfield share: the options every one takes
// (Common: --data, --json, --quiet) and those of a solve to convergence
// (SolveSettings: --solver, --tol, --max-iter), the checks of --patterns and of
// beta, the hit rate of a retrieval and the --json writer.
#pragma once

#include "common/json_output.h"
#include "common/solvers.h"
#include "problems/problem.h"

#include <implicit/core/digits.h>
#include <implicit/solvers/solver.h>

#include <CLI/CLI.hpp>

#include <string>

namespace implicit_apps {

// The options of every subcommand: --data, --json, --quiet.
struct Common {
  std::string data, json;
  bool quiet = false;
};

void AddCommonOptions(CLI::App& sub, Common* c);

// A solve to convergence: --solver, --tol, --max-iter.
struct SolveSettings {
  std::string solver = "picard";
  double tol = 1e-8;
  long max_iter = 500;
  implicit::SolverOptions Options() const { return RunOptions(tol, max_iter, false); }
};

void AddSolveOptions(CLI::App& sub, SolveSettings* s);

implicit::DigitsDataset LoadData(const Common& c);

// --patterns `n` as an int, after checking that `digits` holds that many.
int CheckPatterns(long n, const implicit::DigitsDataset& digits);

// UsageError unless beta * max|score| (scores of `n` stored digits) stays
// within double's range: checked before solving, not found as nan later.
void CheckBeta(const std::string& option, double beta, const implicit::DigitsDataset& digits, int n);

// Throws (exit 1) when a result the table would show is not finite.
void RequireFinite(bool finite, const std::string& what);

// Fraction of columns b with |xi_b - x_b| < 0.1 |x_b|.
double HitRate(const Matrix<double>& xi, const Matrix<double>& x);

// Writes `o` to --json (nothing without it) and prints "json: PATH".
void WriteJson(const Common& c, const Json& o);

}  // namespace implicit_apps
