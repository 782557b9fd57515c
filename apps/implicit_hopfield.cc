// implicit-hopfield: associative-memory experiments on the digits and on
// random patterns.
//
//   implicit-hopfield retrieval --patterns 100 --beta 4
//   implicit-hopfield completion --beta 1
//   implicit-hopfield capacity --dimension 64 --flip 0.1
//   implicit-hopfield sparse --patterns 100
// Every subcommand prints a table and takes --json PATH.
#include "common/app_util.h"
#include "common/problems.h"
#include "common/solvers.h"

#include <implicit/core/digits.h>
#include <implicit/core/energy_maps.h>
#include <implicit/layers/dense_associative_memory.h>
#include <implicit/layers/entmax.h>
#include <implicit/layers/hopfield.h>
#include <implicit/layers/regularized_attention.h>

#include <algorithm>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

const char* kUsage = R"(usage: implicit-hopfield SUBCOMMAND [options]

Associative-memory experiments. Digits are scaled x/8 - 1 everywhere.

  retrieval   store the first --patterns N digits, query each with its bottom half
              (pixels 32..63) zeroed; a hit is |xi - x_i| < 0.1 |x_i| for its own x_i.
              Reports hit rates after one update and after convergence.
                --patterns N (default 100, 1..1797)  --beta B (default 4)
                --solver NAME (default picard)  --tol X (1e-8)  --max-iter N (500)
  completion  memories = digits 0..999, queries = digits 1000..1796 showing only
              pixels 0..31; attention weights softmax(beta * visible-pixel scores);
              reports the MSE on pixels 32..63 and the mean-fill baseline.
                --beta B (default 1)
  capacity    random +-1 patterns in dimension d, probes with a fraction of bits
              flipped, binary retrieval; retrieval rate vs number of stored patterns
              for the quadratic (classical), polynomial and exponential energies.
                --dimension D (default 64)  --flip F (default 0.1)  --probes P (default 50)
                --counts LIST (default 4,8,16,32,64,128,256,512)  --degree N (default 3)
                --seed S (default 1)
  sparse      support size of the retrieved attention weights (softmax, entmax15,
              sparsemax) across beta, on the digits retrieval task.
                --patterns N (default 100)  --betas LIST (default 0.01,0.03,0.1,0.3,1,3)
                --solver NAME (default picard)  --tol X  --max-iter N

Common options: --data PATH (digits.csv.gz or its directory), --json PATH, --quiet, --help
)";

struct Common {
  std::string data, json;
  bool quiet = false;
};

implicit::DigitsDataset LoadData(const Common& c) { return implicit::LoadDigits(FindDigits(c.data)); }

int CheckPatterns(long n, const implicit::DigitsDataset& digits) {
  Args::Require(n >= 1, "--patterns must be >= 1, got " + std::to_string(n));
  Args::Require(n <= digits.size(), "--patterns " + std::to_string(n) + " exceeds the " +
                                        std::to_string(digits.size()) + " digits in " + digits.source);
  return static_cast<int>(n);
}

// Fraction of columns b with |xi_b - x_b| < 0.1 |x_b|.
double HitRate(const Matrix<double>& xi, const Matrix<double>& x) {
  int hits = 0;
  for (Index b = 0; b < x.cols(); ++b) hits += (xi.col(b) - x.col(b)).norm() < 0.1 * x.col(b).norm();
  return static_cast<double>(hits) / static_cast<double>(x.cols());
}

void WriteJson(const Common& c, const JsonObject& o) {
  if (c.json.empty()) return;
  WriteTextFile(c.json, o.ToString() + "\n", "--json");
  std::cout << "json: " << c.json << "\n";
}

implicit::SolverOptions SolveOptions(double tol, long max_iter) {
  implicit::SolverOptions o;
  o.absolute_tolerance = tol;
  o.max_iterations = static_cast<int>(max_iter);
  return o;
}

// ---- retrieval -------------------------------------------------------------------
int Retrieval(Args& args, const Common& c) {
  const long patterns = args.Int("patterns", 100);
  const double beta = args.Double("beta", 4.0);
  const std::string solver_name = args.String("solver", "picard");
  const double tol = args.Double("tol", 1e-8);
  const long max_iter = args.Int("max-iter", 500);
  args.CheckNoneLeft();
  Args::Require(beta > 0, "--beta must be > 0, got " + Fmt(beta));
  Args::Require(tol > 0, "--tol must be > 0, got " + Fmt(tol));
  Args::Require(max_iter >= 1, "--max-iter must be >= 1, got " + std::to_string(max_iter));
  CheckSolverName(solver_name);
  const implicit::DigitsDataset digits = LoadData(c);
  ProblemSettings s;
  s.patterns = CheckPatterns(patterns, digits);
  s.beta = beta;
  HopfieldDigitsProblem problem(digits, s);
  const Matrix<double>& X = problem.patterns();

  Matrix<double> one_step(X.rows(), X.cols());
  problem.map().Evaluate(problem.initial(), one_step);  // xi <- X softmax(beta X^T xi)
  const std::string skip = SkipReason(solver_name, problem.map());
  if (!skip.empty()) throw UsageError("--solver " + solver_name + ": " + skip);
  Matrix<double> z = problem.initial();
  auto solver = MakeSolver(solver_name, SolveOptions(tol, max_iter));
  const implicit::Summary summary = solver->Solve(problem.map(), z);
  const double one = HitRate(one_step, X), conv = HitRate(z, X);
  double mean_iterations = 0;
  for (int it : summary.sample_iterations) mean_iterations += it;
  mean_iterations /= std::max(1, summary.num_samples());

  std::cout << "retrieval: " << X.cols() << " digits stored, queries with pixels 32..63 zeroed, beta "
            << Fmt(beta) << ", solver " << solver_name << "\n";
  Table t({"patterns", "beta", "one-step hit rate", "converged hit rate", "solver", "status",
           "iterations", "mean iterations", "converged"},
          {true, true, true, true, false, false, true, true, true});
  t.AddRow({std::to_string(X.cols()), Fmt(beta), FmtFixed(one, 4), FmtFixed(conv, 4), solver_name,
            implicit::TerminationTypeToString(summary.termination_type), std::to_string(summary.iterations),
            FmtFixed(mean_iterations, 1),
            std::to_string(summary.num_converged()) + "/" + std::to_string(summary.num_samples())});
  t.Print(std::cout);
  JsonObject o;
  o.Set("subcommand", "retrieval").Set("patterns", static_cast<long>(X.cols())).Set("beta", beta)
      .Set("solver", solver_name).Set("one_step_hit_rate", one).Set("converged_hit_rate", conv)
      .Set("status", implicit::TerminationTypeToString(summary.termination_type))
      .Set("iterations", summary.iterations).Set("mean_iterations", mean_iterations)
      .Set("function_evaluations", summary.function_evaluations)
      .Set("residual", summary.absolute_residual).Set("converged_samples", summary.num_converged())
      .Set("samples", summary.num_samples()).Set("seconds", summary.wall_time_seconds);
  WriteJson(c, o);
  return 0;
}

// ---- completion ----------------------------------------------------------------
int Completion(Args& args, const Common& c) {
  const double beta = args.Double("beta", 1.0);
  args.CheckNoneLeft();
  Args::Require(beta > 0, "--beta must be > 0, got " + Fmt(beta));
  const implicit::DigitsDataset digits = LoadData(c);
  const Index memories = 1000;
  if (digits.size() <= memories)
    throw std::runtime_error("completion needs more than 1000 digits; " + digits.source + " has " +
                             std::to_string(digits.size()));
  const Matrix<double> all = digits.Scaled();
  const Matrix<double> X = all.leftCols(memories);
  const Matrix<double> Q = all.rightCols(all.cols() - memories);
  // Scores over the visible pixels 0..31 only; output = full patterns weighted.
  Matrix<double> scores = beta * (X.topRows(32).transpose() * Q.topRows(32));
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

  std::cout << "completion: memories = digits 0..999, queries = digits 1000.." << all.cols() - 1
            << " with pixels 0..31 visible, beta " << Fmt(beta) << "\n";
  Table t({"beta", "queries", "mse (pixels 32..63)", "mean-fill mse", "ratio", "effective memories"},
          {true, true, true, true, true, true});
  t.AddRow({Fmt(beta), std::to_string(B), FmtFixed(mse, 4), FmtFixed(mean_mse, 4),
            FmtFixed(mse / mean_mse, 3), FmtFixed(effective, 1)});
  t.Print(std::cout);
  JsonObject o;
  o.Set("subcommand", "completion").Set("beta", beta).Set("memories", static_cast<long>(memories))
      .Set("queries", static_cast<long>(B)).Set("mse", mse).Set("mean_fill_mse", mean_mse)
      .Set("effective_memories", effective);
  WriteJson(c, o);
  return 0;
}

// ---- capacity ------------------------------------------------------------------
int Capacity(Args& args, const Common& c) {
  const long d = args.Int("dimension", 64);
  const double flip = args.Double("flip", 0.1);
  const long probes = args.Int("probes", 50);
  const long degree = args.Int("degree", 3);
  const long seed = args.Int("seed", 1);
  std::vector<long> counts;
  for (const std::string& s : args.List("counts", {"4", "8", "16", "32", "64", "128", "256", "512"})) {
    char* end = nullptr;
    const long v = std::strtol(s.c_str(), &end, 10);
    Args::Require(!s.empty() && *end == '\0' && v >= 1 && v <= 100000,
                  "--counts: '" + s + "' is not an integer in 1..100000");
    counts.push_back(v);
  }
  args.CheckNoneLeft();
  Args::Require(d >= 2 && d <= 4096, "--dimension must be in 2..4096, got " + std::to_string(d));
  Args::Require(flip >= 0 && flip < 0.5, "--flip must be in [0, 0.5), got " + Fmt(flip));
  Args::Require(probes >= 1 && probes <= 100000, "--probes must be in 1..100000, got " + std::to_string(probes));
  Args::Require(degree >= 2 && degree <= 10, "--degree must be in 2..10, got " + std::to_string(degree));
  Args::Require(seed >= 0, "--seed must be >= 0");

  struct Kind {
    std::string name, prior;
    implicit::Interaction interaction;
  };
  const std::vector<Kind> kinds = {
      {"quadratic", "Gaussian prior K(t)=t^2/2: classical Hopfield", implicit::Interaction::Quadratic()},
      {"polynomial", "F(t)=t^" + std::to_string(degree) + "/" + std::to_string(degree) + ": dense associative memory",
       implicit::Interaction::Polynomial(static_cast<int>(degree))},
      {"exponential", "Poisson prior K(t)=e^t-1: exponential memory", implicit::Interaction::Exponential(1.0)},
  };
  std::cout << "capacity: random +-1 patterns, dimension " << d << ", " << Fmt(flip * 100)
            << "% of bits flipped, " << probes << " probes per size, asynchronous binary dynamics\n";
  for (const Kind& k : kinds) std::cout << "  " << k.name << ": " << k.prior << "\n";
  std::vector<std::string> header = {"patterns", "patterns/d"};
  for (const Kind& k : kinds) header.push_back(k.name);
  Table t(header, std::vector<bool>(header.size(), true));
  std::vector<JsonObject> rows;
  Progress progress(!c.quiet);
  const int flips = static_cast<int>(std::round(flip * d));
  for (long n : counts) {
    std::mt19937 gen(static_cast<unsigned>(seed) * 1000003u + static_cast<unsigned>(n));
    std::bernoulli_distribution coin(0.5);
    Matrix<double> X(d, n);
    for (Index j = 0; j < n; ++j)
      for (Index i = 0; i < d; ++i) X(i, j) = coin(gen) ? 1.0 : -1.0;
    // Probe b targets pattern b mod n with `flips` distinct bits flipped.
    const Index P = probes;
    Matrix<double> targets(d, P), probe(d, P);
    std::vector<Index> idx(d);
    for (Index b = 0; b < P; ++b) {
      targets.col(b) = X.col(b % n);
      probe.col(b) = targets.col(b);
      std::iota(idx.begin(), idx.end(), Index(0));
      std::shuffle(idx.begin(), idx.end(), gen);
      for (int f = 0; f < flips; ++f) probe(idx[f], b) = -probe(idx[f], b);
    }
    std::vector<std::string> row = {std::to_string(n), FmtFixed(static_cast<double>(n) / d, 3)};
    JsonObject jr;
    jr.Set("patterns", n).Set("patterns_per_dimension", static_cast<double>(n) / d);
    for (const Kind& k : kinds) {
      progress.Update("capacity: " + std::to_string(n) + " patterns, " + k.name);
      Matrix<double> s = probe;
      implicit::BinaryRetrievalOptions o;
      o.seed = static_cast<unsigned>(seed);
      implicit::RetrieveBinary<double>(X, k.interaction, s, o);
      int ok = 0;
      for (Index b = 0; b < P; ++b) ok += (s.col(b) - targets.col(b)).cwiseAbs().maxCoeff() == 0.0;
      const double rate = static_cast<double>(ok) / static_cast<double>(P);
      row.push_back(FmtFixed(rate, 3));
      jr.Set(k.name + "_retrieval_rate", rate);
    }
    t.AddRow(row);
    rows.push_back(jr);
  }
  progress.Done();
  std::cout << "retrieval rate = fraction of probes that end exactly on their own pattern\n";
  t.Print(std::cout);
  JsonObject o;
  o.Set("subcommand", "capacity").Set("dimension", d).Set("flip", flip).Set("probes", probes)
      .Set("degree", degree).Set("results", rows);
  WriteJson(c, o);
  return 0;
}

// ---- sparse ----------------------------------------------------------------------
int Sparse(Args& args, const Common& c) {
  const long patterns = args.Int("patterns", 100);
  std::vector<double> betas;
  for (const std::string& s : args.List("betas", {"0.01", "0.03", "0.1", "0.3", "1", "3"})) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    Args::Require(!s.empty() && *end == '\0' && std::isfinite(v) && v > 0,
                  "--betas: '" + s + "' is not a number > 0");
    betas.push_back(v);
  }
  const std::string solver_name = args.String("solver", "picard");
  const double tol = args.Double("tol", 1e-8);
  const long max_iter = args.Int("max-iter", 500);
  args.CheckNoneLeft();
  Args::Require(tol > 0, "--tol must be > 0, got " + Fmt(tol));
  Args::Require(max_iter >= 1, "--max-iter must be >= 1, got " + std::to_string(max_iter));
  CheckSolverName(solver_name);
  const implicit::DigitsDataset digits = LoadData(c);
  const int n = CheckPatterns(patterns, digits);
  const DigitPatterns data = MakeDigitPatterns(digits, n);

  struct Kind {
    std::string name;
    double alpha;
  };
  const std::vector<Kind> kinds = {{"softmax", 1.0}, {"entmax15", 1.5}, {"sparsemax", 2.0}};
  std::cout << "sparse: " << n << " digits stored, queries with pixels 32..63 zeroed, retrieval xi <- X "
            << "entmax_alpha(beta X^T xi) to convergence (" << solver_name << ")\n";
  Table t({"attention", "alpha", "beta", "mean support", "min", "max", "one-step support",
           "converged hit rate", "status"},
          {false, true, true, true, true, true, true, true, false});
  std::vector<JsonObject> rows;
  Progress progress(!c.quiet);
  for (const Kind& k : kinds) {
    for (double beta : betas) {
      progress.Update("sparse: " + k.name + ", beta " + Fmt(beta));
      implicit::SparseHopfieldEnergy<double>::Options eo;
      eo.alpha = k.alpha;
      eo.beta = beta;
      implicit::SparseHopfieldEnergy<double> energy(data.patterns, eo);
      implicit::CccpMap<double> map(energy);
      const std::string skip = SkipReason(solver_name, map);
      if (!skip.empty()) throw UsageError("--solver " + solver_name + ": " + skip);
      Matrix<double> p0(n, data.queries.cols());
      energy.Weights(data.queries, p0);
      Matrix<double> z = data.queries;
      const implicit::Summary summary = MakeSolver(solver_name, SolveOptions(tol, max_iter))->Solve(map, z);
      Matrix<double> p(n, z.cols());
      energy.Weights(z, p);
      auto support = [](const Matrix<double>& w, Index b) { return (w.col(b).array() > 0.0).count(); };
      double mean = 0, mean0 = 0;
      long lo = n, hi = 0;
      for (Index b = 0; b < z.cols(); ++b) {
        const long sb = static_cast<long>(support(p, b));
        mean += sb;
        mean0 += static_cast<double>(support(p0, b));
        lo = std::min(lo, sb);
        hi = std::max(hi, sb);
      }
      mean /= z.cols();
      mean0 /= z.cols();
      const double hit = HitRate(z, data.patterns);
      const std::string status = implicit::TerminationTypeToString(summary.termination_type);
      t.AddRow({k.name, Fmt(k.alpha), Fmt(beta), FmtFixed(mean, 2), std::to_string(lo), std::to_string(hi),
                FmtFixed(mean0, 2), FmtFixed(hit, 3), status});
      JsonObject r;
      r.Set("attention", k.name).Set("alpha", k.alpha).Set("beta", beta).Set("mean_support", mean)
          .Set("min_support", lo).Set("max_support", hi).Set("one_step_mean_support", mean0)
          .Set("converged_hit_rate", hit).Set("status", status).Set("iterations", summary.iterations)
          .Set("converged_samples", summary.num_converged()).Set("samples", summary.num_samples());
      rows.push_back(r);
    }
  }
  progress.Done();
  std::cout << "support = number of stored patterns with attention weight > 0 at the fixed point (of "
            << n << ")\n";
  t.Print(std::cout);
  JsonObject o;
  o.Set("subcommand", "sparse").Set("patterns", static_cast<long>(n)).Set("solver", solver_name)
      .Set("results", rows);
  WriteJson(c, o);
  return 0;
}

int Run(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing subcommand (retrieval, completion, capacity or sparse)");
  if (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return 0;
  }
  const std::string sub = argv[1];
  Args args(argc, argv, 2, {"quiet", "help"});
  if (args.Flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  Common c;
  c.data = args.String("data");
  c.json = args.String("json");
  c.quiet = args.Flag("quiet");
  CheckWritable(c.json, "--json");
  if (sub == "retrieval") return Retrieval(args, c);
  if (sub == "completion") return Completion(args, c);
  if (sub == "capacity") return Capacity(args, c);
  if (sub == "sparse") return Sparse(args, c);
  throw UsageError("unknown subcommand '" + sub + "' (available: retrieval, completion, capacity, sparse)");
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-hopfield", [&] { return implicit_apps::Run(argc, argv); });
}
