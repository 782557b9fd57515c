// implicit-hopfield: associative-memory experiments on the digits and on
// random patterns.
//
//   implicit-hopfield retrieval --patterns 100 --beta 4
//   implicit-hopfield retrieval --patterns 1797 --beta 2 --device cuda   # on the GPU
//   implicit-hopfield completion --beta 1
//   implicit-hopfield capacity --dimension 64 --flip 0.1
//   implicit-hopfield sparse --patterns 100
// Every subcommand prints a table and takes --json PATH.
#include "common/cli.h"
#include "common/data_paths.h"
#include "common/format.h"
#include "common/json_output.h"
#include "common/output_files.h"
#include "common/progress.h"
#include "common/solvers.h"
#include "common/table.h"
#include "problems/registry.h"

#include <implicit/core/digits.h>
#include <implicit/core/energy_maps.h>
#include <implicit/layers/dense_associative_memory.h>
#include <implicit/layers/entmax.h>
#include <implicit/layers/hopfield.h>
#include <implicit/layers/regularized_attention.h>
#ifdef IMPLICIT_WITH_CUDA
#include <implicit/core/cuda_hopfield.h>
#include <implicit/solvers/cuda_solvers.h>
#endif

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

// The options of every subcommand: --data, --json, --quiet.
struct Common {
  std::string data, json;
  bool quiet = false;
};

void AddCommonOptions(CLI::App& sub, Common* c) {
  sub.add_option("--data", c->data, "digits.csv.gz, or a directory holding it")->default_str("")->check(PathCheck());
  sub.add_option("--json", c->json, "write the results as JSON")->check(PathCheck());
  sub.add_flag("--quiet", c->quiet, "no progress line on stderr");
}

// A solve to convergence: --solver, --tol, --max-iter.
struct SolveSettings {
  std::string solver = "picard";
  double tol = 1e-8;
  long max_iter = 500;
  implicit::SolverOptions Options() const {
    implicit::SolverOptions o;
    o.absolute_tolerance = tol;
    o.max_iterations = static_cast<int>(max_iter);
    return o;
  }
};

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

// UsageError unless beta * max|score| (scores of `n` stored digits) stays
// within double's range: checked before solving, not found as nan later.
void CheckBeta(const std::string& option, double beta, const implicit::DigitsDataset& digits, int n) {
  const std::string error =
      ScaleRangeError(option, "beta * max|score|", beta, MaxDigitScore(digits, n), RangeOf<double>());
  if (!error.empty()) throw UsageError(error);
}

// Throws (exit 1) when a result the table would show is not finite.
void RequireFinite(bool finite, const std::string& what) {
  if (!finite) throw std::runtime_error(what + " is not finite (inf or nan); no result to report");
}

// Fraction of columns b with |xi_b - x_b| < 0.1 |x_b|.
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

// ---- retrieval -------------------------------------------------------------------
struct RetrievalSettings {
  long patterns = 100;
  double beta = 4.0;
  std::string device = "cpu";
  SolveSettings solve;
};

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

// ---- completion ----------------------------------------------------------------
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

// ---- capacity ------------------------------------------------------------------
struct CapacitySettings {
  long dimension = 64, probes = 50, degree = 3, seed = 1;
  double flip = 0.1;
  std::vector<std::string> counts = {"4", "8", "16", "32", "64", "128", "256", "512"};
};

CLI::App* AddCapacity(CLI::App& app, CapacitySettings* s) {
  CLI::App* sub = app.add_subcommand(
      "capacity",
      "random +-1 patterns in dimension d, probes with a fraction of bits flipped, binary\n"
      "retrieval; retrieval rate vs number of stored patterns for the quadratic\n"
      "(classical), polynomial and exponential energies.");
  sub->add_option("--dimension", s->dimension, "pattern dimension d")->check(IntIn(2, 4096));
  sub->add_option("--flip", s->flip, "fraction of bits flipped in a probe")
      ->check(RealCheck([](double f) { return f >= 0 && f < 0.5; }, "in [0, 0.5)"));
  sub->add_option("--probes", s->probes, "probes per number of patterns")->check(IntIn(1, 100000));
  AddList(*sub, "--counts", &s->counts, "numbers of stored patterns, each in 1..100000", JoinNames(s->counts, ","));
  sub->add_option("--degree", s->degree, "degree of the polynomial energy")->check(IntIn(2, 10));
  sub->add_option("--seed", s->seed, "seed of patterns, probes and update order")->check(IntIn(0, 4294967295L));
  return sub;
}

struct Interaction {
  std::string name, prior;
  implicit::Interaction interaction;
};

// n random +-1 patterns in dimension d; `probes` probes, probe b targeting
// pattern b mod n with `flips` distinct bits flipped. Returns the fraction of
// probes each interaction retrieves exactly.
std::vector<double> CapacityRates(const CapacitySettings& s, long n, const std::vector<Interaction>& kinds,
                                  Progress& progress) {
  const Index d = s.dimension, P = s.probes;
  const int flips = static_cast<int>(std::round(s.flip * static_cast<double>(d)));
  std::mt19937 gen(static_cast<unsigned>(s.seed) * 1000003u + static_cast<unsigned>(n));
  std::bernoulli_distribution coin(0.5);
  Matrix<double> X(d, n);
  for (Index j = 0; j < n; ++j)
    for (Index i = 0; i < d; ++i) X(i, j) = coin(gen) ? 1.0 : -1.0;
  Matrix<double> targets(d, P), probe(d, P);
  std::vector<Index> idx(static_cast<std::size_t>(d));
  for (Index b = 0; b < P; ++b) {
    targets.col(b) = X.col(b % n);
    probe.col(b) = targets.col(b);
    std::iota(idx.begin(), idx.end(), Index(0));
    std::shuffle(idx.begin(), idx.end(), gen);
    for (int f = 0; f < flips; ++f) probe(idx[f], b) = -probe(idx[f], b);
  }
  std::vector<double> rates;
  for (const Interaction& k : kinds) {
    progress.Update("capacity: " + std::to_string(n) + " patterns, " + k.name);
    Matrix<double> state = probe;
    implicit::BinaryRetrievalOptions o;
    o.seed = static_cast<unsigned>(s.seed);
    implicit::RetrieveBinary<double>(X, k.interaction, state, o);
    int ok = 0;
    for (Index b = 0; b < P; ++b) ok += (state.col(b) - targets.col(b)).cwiseAbs().maxCoeff() == 0.0;
    rates.push_back(static_cast<double>(ok) / static_cast<double>(P));
  }
  return rates;
}

int Capacity(const CapacitySettings& s, const Common& c) {
  const std::vector<long> counts = ParseNumbers<long>("--counts", s.counts, IntIn(1, 100000));
  // The patterns (d x n) and the probes, their targets and states (d x P each).
  const double largest = static_cast<double>(*std::max_element(counts.begin(), counts.end()));
  const double bytes = 8.0 * static_cast<double>(s.dimension) * (largest + 3.0 * static_cast<double>(s.probes));
  Require(bytes <= 2e9, std::string(largest >= 3.0 * static_cast<double>(s.probes) ? "--counts" : "--probes") +
                            ": " + Fmt(bytes * 1e-9, 3) + " GB of patterns and probes at --dimension " +
                            std::to_string(s.dimension) + " (at most 2 GB)");
  const std::string degree = std::to_string(s.degree);
  const std::vector<Interaction> kinds = {
      {"quadratic", "Gaussian prior K(t)=t^2/2: classical Hopfield", implicit::Interaction::Quadratic()},
      {"polynomial", "F(t)=t^" + degree + "/" + degree + ": dense associative memory",
       implicit::Interaction::Polynomial(static_cast<int>(s.degree))},
      {"exponential", "Poisson prior K(t)=e^t-1: exponential memory", implicit::Interaction::Exponential(1.0)},
  };
  std::cout << "capacity: random +-1 patterns, dimension " << s.dimension << ", " << Fmt(s.flip * 100)
            << "% of bits flipped, " << s.probes << " probes per size, asynchronous binary dynamics\n";
  for (const Interaction& k : kinds) std::cout << "  " << k.name << ": " << k.prior << "\n";
  std::vector<std::string> header = {"patterns", "patterns/d"};
  for (const Interaction& k : kinds) header.push_back(k.name);
  Table t(header, std::vector<bool>(header.size(), true));
  Json rows = Json::array();
  Progress progress(!c.quiet);
  for (long n : counts) {
    const double per_dimension = static_cast<double>(n) / static_cast<double>(s.dimension);
    const std::vector<double> rates = CapacityRates(s, n, kinds, progress);
    std::vector<std::string> row = {std::to_string(n), FmtFixed(per_dimension, 3)};
    Json jr = {{"patterns", n}, {"patterns_per_dimension", per_dimension}};
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      row.push_back(FmtFixed(rates[k], 3));
      jr[kinds[k].name + "_retrieval_rate"] = rates[k];
    }
    t.AddRow(row);
    rows.push_back(jr);
  }
  progress.Done();
  std::cout << "retrieval rate = fraction of probes that end exactly on their own pattern\n";
  t.Print(std::cout);
  WriteJson(c, {{"subcommand", "capacity"}, {"dimension", s.dimension}, {"flip", s.flip}, {"probes", s.probes},
                {"degree", s.degree}, {"results", rows}});
  return 0;
}

// ---- sparse ----------------------------------------------------------------------
struct SparseSettings {
  long patterns = 100;
  std::vector<std::string> betas = {"0.01", "0.03", "0.1", "0.3", "1", "3"};
  SolveSettings solve;
};

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

int Run(int argc, char** argv) {
  CLI::App app("Associative-memory experiments. Digits are scaled x/8 - 1 everywhere.", "implicit-hopfield");
  ConfigureApp(app);
  app.require_subcommand(0, 1);
  RetrievalSettings retrieval;
  double completion_beta = 1.0;
  CapacitySettings capacity;
  SparseSettings sparse;
  CLI::App* retrieval_cmd = AddRetrieval(app, &retrieval);
  CLI::App* completion_cmd = AddCompletion(app, &completion_beta);
  CLI::App* capacity_cmd = AddCapacity(app, &capacity);
  CLI::App* sparse_cmd = AddSparse(app, &sparse);
  Common common;
  for (CLI::App* sub : {retrieval_cmd, completion_cmd, capacity_cmd, sparse_cmd}) AddCommonOptions(*sub, &common);
  if (!Parse(app, argc, argv)) return 0;
  if (app.get_subcommands().empty())
    throw UsageError("missing subcommand (retrieval, completion, capacity or sparse)");
  CheckWritable(common.json, "--json");
  CheckDistinctFiles({{"--json", common.json}}, {{"--data", common.data}});
  if (retrieval_cmd->parsed()) return Retrieval(retrieval, common);
  if (completion_cmd->parsed()) return Completion(completion_beta, common);
  if (capacity_cmd->parsed()) return Capacity(capacity, common);
  return Sparse(sparse, common);
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-hopfield", [&] { return implicit_apps::Run(argc, argv); });
}
