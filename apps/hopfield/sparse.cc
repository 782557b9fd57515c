// implicit-hopfield sparse (hopfield/sparse.h): its options, the solves across
// attention kinds and beta, the support statistics, the table and the JSON.
#include "hopfield/sparse.h"

#include "common/cli.h"
#include "common/format.h"
#include "common/progress.h"
#include "common/solvers.h"
#include "common/table.h"

#include <implicit/core/energy_maps.h>
#include <implicit/layers/regularized_attention.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace implicit_apps {

CLI::App* AddSparse(CLI::App& app, SparseSettings* s) {
  CLI::App* sub = app.add_subcommand(
      "sparse",
      "support size of the retrieved attention weights (softmax, entmax15, sparsemax)\n"
      "across beta, on the digits retrieval task.");
  sub->add_option("--patterns", s->patterns, "digits stored, up to 1797")->check(IntIn(1, 1000000));
  AddList(*sub, "--betas", &s->betas, "inverse temperatures, each > 0", JoinNames(s->betas, ","));
  AddSolveOptions(*sub, &s->solve);
  return sub;
}

namespace {

struct SupportStats {
  double mean = 0, one_step_mean = 0;
  long min = 0, max = 0;
};

// Support sizes (weights > 0) of the weights p (converged) and p0 (one step).
SupportStats Supports(const Matrix<double>& p, const Matrix<double>& p0) {
  SupportStats st;
  st.min = static_cast<long>(p.rows());
  for (Index b = 0; b < p.cols(); ++b) {
    const long sb = static_cast<long>((p.col(b).array() > 0.0).count());
    st.mean += static_cast<double>(sb);
    st.one_step_mean += static_cast<double>((p0.col(b).array() > 0.0).count());
    st.min = std::min(st.min, sb);
    st.max = std::max(st.max, sb);
  }
  st.mean /= static_cast<double>(p.cols());
  st.one_step_mean /= static_cast<double>(p.cols());
  return st;
}

}  // namespace

int Sparse(const SparseSettings& s, const Common& c) {
  const std::vector<double> betas = ParseNumbers<double>("--betas", s.betas, Positive());
  const implicit::DigitsDataset digits = LoadData(c);
  const int n = CheckPatterns(s.patterns, digits);
  const DigitPatterns data = MakeDigitPatterns(digits, n);
  const std::vector<std::pair<std::string, double>> kinds = {{"softmax", 1.0}, {"entmax15", 1.5}, {"sparsemax", 2.0}};
  std::cout << "sparse: " << n << " digits stored, queries with pixels 32..63 zeroed, retrieval xi <- X "
            << "entmax_alpha(beta X^T xi) to convergence (" << s.solve.solver << ")\n";
  Table t({"attention", "alpha", "beta", "mean support", "min", "max", "one-step support", "converged hit rate",
           "status"},
          {false, true, true, true, true, true, true, true, false});
  Json rows = Json::array();
  Progress progress(!c.quiet);
  for (const auto& [name, alpha] : kinds) {
    for (double beta : betas) {
      progress.Update("sparse: " + name + ", beta " + Fmt(beta));
      CheckBeta("--betas", beta, digits, n);
      implicit::SparseHopfieldEnergy<double>::Options eo;
      eo.alpha = alpha;
      eo.beta = beta;
      implicit::SparseHopfieldEnergy<double> energy(data.patterns, eo);
      implicit::CccpMap<double> map(energy);
      const std::string skip = SkipReason(s.solve.solver, map);
      if (!skip.empty()) throw UsageError("--solver " + s.solve.solver + ": " + skip);
      Matrix<double> p0(n, data.queries.cols()), p(n, data.queries.cols());
      energy.Weights(data.queries, p0);
      Matrix<double> z = data.queries;
      const implicit::Summary summary = MakeSolver(s.solve.solver, s.solve.Options())->Solve(map, z);
      const std::string status = implicit::TerminationTypeToString(summary.termination_type);
      RequireFinite(z.allFinite(), "sparse: the " + name + " state at beta " + Fmt(beta) + " (" + status + ")");
      energy.Weights(z, p);
      const SupportStats st = Supports(p, p0);
      const double hit = HitRate(z, data.patterns);
      t.AddRow({name, Fmt(alpha), Fmt(beta), FmtFixed(st.mean, 2), std::to_string(st.min), std::to_string(st.max),
                FmtFixed(st.one_step_mean, 2), FmtFixed(hit, 3), status});
      rows.push_back({{"attention", name}, {"alpha", alpha}, {"beta", beta}, {"mean_support", st.mean},
                      {"min_support", st.min}, {"max_support", st.max}, {"one_step_mean_support", st.one_step_mean},
                      {"converged_hit_rate", hit}, {"status", status}, {"iterations", summary.iterations},
                      {"converged_samples", summary.num_converged()}, {"samples", summary.num_samples()}});
    }
  }
  progress.Done();
  std::cout << "support = number of stored patterns with attention weight > 0 at the fixed point (of " << n << ")\n";
  t.Print(std::cout);
  WriteJson(c, {{"subcommand", "sparse"}, {"patterns", n}, {"solver", s.solve.solver}, {"results", rows}});
  return 0;
}

}  // namespace implicit_apps
