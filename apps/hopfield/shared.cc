// The options, checks and output that implicit-hopfield's subcommands share
// (hopfield/shared.h).
#include "hopfield/shared.h"

#include "common/cli.h"
#include "common/data_paths.h"
#include "common/solvers.h"

#include <iostream>
#include <stdexcept>
#include <string>

namespace implicit_apps {

void AddCommonOptions(CLI::App& sub, Common* c) {
  sub.add_option("--data", c->data, "digits.csv.gz, or a directory holding it")->default_str("")->check(PathCheck());
  sub.add_option("--json", c->json, "write the results as JSON")->check(PathCheck());
  sub.add_flag("--quiet", c->quiet, "no progress line on stderr");
}

void AddSolveOptions(CLI::App& sub, SolveSettings* s) {
  sub.add_option("--solver", s->solver, "forward solver")->check(SolverNameCheck());
  sub.add_option("--tol", s->tol, "absolute residual tolerance |f(z) - z| per sample")->check(Positive());
  sub.add_option("--max-iter", s->max_iter, "iteration budget")->check(IntIn(1, 1000000));
}

implicit::DigitsDataset LoadData(const Common& c) { return LoadDigitsOption(c.data); }

int CheckPatterns(long n, const implicit::DigitsDataset& digits) {
  Require(n <= digits.size(), "--patterns: " + std::to_string(n) + " exceeds the " + std::to_string(digits.size()) +
                                  " digits in " + digits.source);
  return static_cast<int>(n);
}

void CheckBeta(const std::string& option, double beta, const implicit::DigitsDataset& digits, int n) {
  const std::string error =
      ScaleRangeError(option, "beta * max|score|", beta, MaxDigitScore(digits, n), RangeOf<double>());
  if (!error.empty()) throw UsageError(error);
}

void RequireFinite(bool finite, const std::string& what) {
  if (!finite) throw std::runtime_error(what + " is not finite (inf or nan); no result to report");
}

double HitRate(const Matrix<double>& xi, const Matrix<double>& x) {
  int hits = 0;
  for (Index b = 0; b < x.cols(); ++b) hits += (xi.col(b) - x.col(b)).norm() < 0.1 * x.col(b).norm();
  return static_cast<double>(hits) / static_cast<double>(x.cols());
}

void WriteJson(const Common& c, const Json& o) {
  if (c.json.empty()) return;
  WriteJsonFile(c.json, o, "--json");
  std::cout << "json: " << c.json << "\n";
}

}  // namespace implicit_apps
