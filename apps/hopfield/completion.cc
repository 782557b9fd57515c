// implicit-hopfield completion (hopfield/completion.h): its option, the
// one-step completion, the table and the JSON.
#include "hopfield/completion.h"

#include "common/cli.h"
#include "common/format.h"
#include "common/table.h"

#include <implicit/core/digits.h>
#include <implicit/layers/entmax.h>

#include <cmath>
#include <iostream>
#include <stdexcept>
#include <string>

namespace implicit_apps {

CLI::App* AddCompletion(CLI::App& app, double* beta) {
  CLI::App* sub = app.add_subcommand(
      "completion",
      "memories = digits 0..999, queries = digits 1000..1796 showing only pixels 0..31;\n"
      "attention weights softmax(beta * visible-pixel scores); reports the MSE on\n"
      "pixels 32..63 and the mean-fill baseline.");
  sub->add_option("--beta", *beta, "inverse temperature")->check(Positive());
  return sub;
}

int Completion(double beta, const Common& c) {
  const implicit::DigitsDataset digits = LoadData(c);
  const Index memories = 1000;
  if (digits.size() <= memories)
    throw std::runtime_error("completion needs more than 1000 digits; " + digits.source + " has " +
                             std::to_string(digits.size()));
  const Matrix<double> all = digits.Scaled();
  const Matrix<double> X = all.leftCols(memories);
  const Matrix<double> Q = all.rightCols(all.cols() - memories);
  // Scores over the visible pixels 0..31 only; output = full patterns weighted.
  Matrix<double> scores = X.topRows(32).transpose() * Q.topRows(32);
  const std::string range =
      ScaleRangeError("--beta", "beta * max|score|", beta, scores.cwiseAbs().maxCoeff(), RangeOf<double>());
  if (!range.empty()) throw UsageError(range);
  scores *= beta;
  Matrix<double> p(scores.rows(), scores.cols());
  implicit::entmax::Softmax<double>(scores, p);
  const Matrix<double> completed = X * p;
  const Index B = Q.cols();
  const double mse = (completed.bottomRows(32) - Q.bottomRows(32)).squaredNorm() / (32.0 * B);
  const Vector<double> mean = X.bottomRows(32).rowwise().mean();
  const double mean_mse = (Q.bottomRows(32).colwise() - mean).squaredNorm() / (32.0 * B);
  // Effective number of memories used: 1 / sum p^2.
  double effective = 0;
  for (Index b = 0; b < B; ++b) effective += 1.0 / p.col(b).squaredNorm();
  effective /= B;
  RequireFinite(std::isfinite(mse) && std::isfinite(effective), "completion: the completed pixels");

  std::cout << "completion: memories = digits 0..999, queries = digits 1000.." << all.cols() - 1
            << " with pixels 0..31 visible, beta " << Fmt(beta) << "\n";
  Table t({"beta", "queries", "mse (pixels 32..63)", "mean-fill mse", "ratio", "effective memories"},
          {true, true, true, true, true, true});
  t.AddRow({Fmt(beta), std::to_string(B), FmtFixed(mse, 4), FmtFixed(mean_mse, 4), FmtFixed(mse / mean_mse, 3),
            FmtFixed(effective, 1)});
  t.Print(std::cout);
  WriteJson(c, {{"subcommand", "completion"}, {"beta", beta}, {"memories", memories}, {"queries", B},
                {"mse", mse}, {"mean_fill_mse", mean_mse}, {"effective_memories", effective}});
  return 0;
}

}  // namespace implicit_apps
