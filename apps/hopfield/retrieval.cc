// implicit-hopfield retrieval (hopfield/retrieval.h): its options, the solve on
// the CPU or the GPU, the table and the JSON.
#include "hopfield/retrieval.h"

#include "common/cli.h"
#include "common/format.h"
#include "common/solvers.h"
#include "common/table.h"
#include "problems/registry.h"

#include <implicit/core/digits.h>
#ifdef IMPLICIT_WITH_CUDA
#include <implicit/core/cuda_hopfield.h>
#include <implicit/solvers/cuda_solvers.h>
#endif

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

namespace implicit_apps {

CLI::App* AddRetrieval(CLI::App& app, RetrievalSettings* r) {
  CLI::App* sub = app.add_subcommand(
      "retrieval",
      "store the first --patterns N digits, query each with its bottom half (pixels 32..63)\n"
      "zeroed; a hit is |xi - x_i| < 0.1 |x_i| for its own x_i. Reports hit rates after\n"
      "one update and after convergence.");
  sub->add_option("--patterns", r->patterns, "digits stored, up to 1797")->check(IntIn(1, 1000000));
  sub->add_option("--beta", r->beta, "inverse temperature")->check(Positive());
  sub->add_option("--device", r->device,
                  "cpu, or cuda: the map, the one-step update and the solve on the GPU\n"
                  "(device solvers: picard, anderson; docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  AddSolveOptions(*sub, &r->solve);
  return sub;
}

namespace {

// The one-step update and the solve from the queries on the GPU (--device cuda).
implicit::Summary SolveOnDevice(const Matrix<double>& X, const Matrix<double>& queries, double beta,
                                const SolveSettings& solve, Matrix<double>* one_step, Matrix<double>* z) {
#ifdef IMPLICIT_WITH_CUDA
  implicit::cuda::Context context;
  std::cout << "device: " << context.device_name() << "\n";
  implicit::cuda::HopfieldCccpMap<double> map(context, X, beta);
  implicit::cuda::DeviceMatrix<double> state(context, queries), image(queries.rows(), queries.cols());
  map.Evaluate(context, state.data(), queries.cols(), nullptr, image.data(), nullptr);
  *one_step = image.ToHost(context);
  auto solver = implicit::cuda::MakeDeviceSolver<double>(solve.solver, {}, solve.Options());
  const implicit::Summary summary = solver->Solve(context, map, state);
  *z = state.ToHost(context);
  return summary;
#else
  (void)X, (void)queries, (void)beta, (void)solve, (void)one_step, (void)z;
  throw UsageError("--device cuda: this build has no CUDA backend (configure with IMPLICIT_WITH_CUDA=ON)");
#endif
}

}  // namespace

int Retrieval(const RetrievalSettings& r, const Common& c) {
  const implicit::DigitsDataset digits = LoadData(c);
  ProblemSettings s;
  s.patterns = CheckPatterns(r.patterns, digits);
  s.beta = r.beta;
  CheckBeta("--beta", r.beta, digits, s.patterns);
  const std::unique_ptr<Problem> problem = MakeProblemOf<double>("hopfield-digits", digits, s);
  const Matrix<double> X = MakeDigitPatterns(digits, s.patterns).patterns;
  const std::string& solver_name = r.solve.solver;

  Matrix<double> one_step(X.rows(), X.cols()), z = problem->initial();
  implicit::Summary summary;
  if (r.device == "cuda") {
    summary = SolveOnDevice(X, problem->initial(), r.beta, r.solve, &one_step, &z);
  } else {
    problem->map().Evaluate(problem->initial(), one_step);  // xi <- X softmax(beta X^T xi)
    const std::string skip = SkipReason(solver_name, problem->map());
    if (!skip.empty()) throw UsageError("--solver " + solver_name + ": " + skip);
    summary = MakeSolver(solver_name, r.solve.Options())->Solve(problem->map(), z);
  }
  RequireFinite(one_step.allFinite(), "retrieval: the one-step update");
  const std::string status = implicit::TerminationTypeToString(summary.termination_type);
  RequireFinite(z.allFinite(), "retrieval: the state the " + solver_name + " solve ended in (" + status + ")");
  const double one = HitRate(one_step, X), conv = HitRate(z, X);
  double mean_iterations = 0;
  for (int it : summary.sample_iterations) mean_iterations += it;
  mean_iterations /= std::max(1, summary.num_samples());

  std::cout << "retrieval: " << X.cols() << " digits stored, queries with pixels 32..63 zeroed, beta "
            << Fmt(r.beta) << ", solver " << solver_name << (r.device == "cuda" ? " on the GPU" : "") << "\n";
  Table t({"patterns", "beta", "one-step hit rate", "converged hit rate", "solver", "status", "iterations",
           "mean iterations", "converged"},
          {true, true, true, true, false, false, true, true, true});
  t.AddRow({std::to_string(X.cols()), Fmt(r.beta), FmtFixed(one, 4), FmtFixed(conv, 4), solver_name, status,
            std::to_string(summary.iterations), FmtFixed(mean_iterations, 1),
            std::to_string(summary.num_converged()) + "/" + std::to_string(summary.num_samples())});
  t.Print(std::cout);
  WriteJson(c, {{"subcommand", "retrieval"}, {"patterns", X.cols()}, {"beta", r.beta}, {"solver", solver_name},
                {"device", r.device},
                {"one_step_hit_rate", one}, {"converged_hit_rate", conv}, {"status", status},
                {"iterations", summary.iterations}, {"mean_iterations", mean_iterations},
                {"function_evaluations", summary.function_evaluations}, {"residual", summary.absolute_residual},
                {"converged_samples", summary.num_converged()}, {"samples", summary.num_samples()},
                {"seconds", summary.wall_time_seconds}});
  return 0;
}

}  // namespace implicit_apps
