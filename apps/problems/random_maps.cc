// Random user-like maps and the solver sweep over them (random_maps.h).
#include "problems/random_maps.h"

#include "common/format.h"
#include "common/table.h"

#include <implicit/core/energy_maps.h>
#include <implicit/core/spectral_norm.h>
#include <implicit/layers/entmax.h>
#include <implicit/layers/modern_hopfield_energy.h>
#include <implicit/solvers/registry.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <stdexcept>
#include <utility>

namespace implicit_apps {
namespace {

using implicit::ConstMatrixRef;
using implicit::FixedPointMap;
using implicit::Index;
using implicit::Matrix;
using implicit::MatrixRef;

// A map with a per-sample input: each subclass's Apply(z, input, out) maps a
// block of states whose inputs are the matching columns of `input`. Joins the
// solvers' active set (SupportsColumnSubsets).
class InjectedMap : public FixedPointMap<double> {
 public:
  InjectedMap(Index dimension, Matrix<double> input) : dimension_(dimension), input_(std::move(input)) {}
  Index dimension() const override { return dimension_; }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    if (z.cols() != input_.cols())
      throw std::invalid_argument("random map: batch of " + std::to_string(z.cols()) + ", inputs for " +
                                  std::to_string(input_.cols()));
    Apply(z, input_, out);
  }
  bool SupportsColumnSubsets() const override { return true; }
  void EvaluateColumns(ConstMatrixRef<double> z, const std::vector<Index>& columns,
                       MatrixRef<double> out) const override {
    Matrix<double> block(input_.rows(), static_cast<Index>(columns.size()));
    for (Index j = 0; j < block.cols(); ++j) block.col(j) = input_.col(columns[j]);
    Apply(z, block, out);
  }

 protected:
  virtual void Apply(ConstMatrixRef<double> z, const Matrix<double>& input, MatrixRef<double> out) const = 0;

 private:
  Index dimension_;
  Matrix<double> input_;
};

// z = tanh(W z + c_b).
class TanhMap : public InjectedMap {
 public:
  TanhMap(Matrix<double> w, Matrix<double> c) : InjectedMap(w.rows(), std::move(c)), w_(std::move(w)) {}

 protected:
  void Apply(ConstMatrixRef<double> z, const Matrix<double>& c, MatrixRef<double> out) const override {
    out.noalias() = w_ * z;
    out = (out + c).array().tanh().matrix();
  }

 private:
  Matrix<double> w_;
};

// z = P weights(beta P^T z + d_b), weights: softmax (alpha 1), 1.5-entmax or sparsemax (2).
class AttentionMap : public InjectedMap {
 public:
  AttentionMap(Matrix<double> p, double beta, double alpha, Matrix<double> d)
      : InjectedMap(p.rows(), std::move(d)), p_(std::move(p)), beta_(beta), alpha_(alpha) {}

 protected:
  void Apply(ConstMatrixRef<double> z, const Matrix<double>& d, MatrixRef<double> out) const override {
    Matrix<double> scores = d;
    scores.noalias() += beta_ * (p_.transpose() * z);
    Matrix<double> weights(scores.rows(), scores.cols());
    implicit::entmax::Entmax<double>(scores, alpha_, weights);
    out.noalias() = p_ * weights;
  }

 private:
  Matrix<double> p_;
  double beta_, alpha_;
};

// z = relu(z - a (M z - c_b)) with M = I - W monotone (M + M^T >= 2 m I).
class MonotoneMap : public InjectedMap {
 public:
  MonotoneMap(Matrix<double> m, double step, Matrix<double> c)
      : InjectedMap(m.rows(), std::move(c)), m_(std::move(m)), step_(step) {}

 protected:
  void Apply(ConstMatrixRef<double> z, const Matrix<double>& c, MatrixRef<double> out) const override {
    out.noalias() = m_ * z;
    out = (z - step_ * (out - c)).cwiseMax(0.0);
  }

 private:
  Matrix<double> m_;
  double step_;
};

// The library's Hopfield CCCP map handed over as a plain map: energy() stays nullptr.
class HiddenEnergyMap : public FixedPointMap<double> {
 public:
  HiddenEnergyMap(Matrix<double> patterns, double beta)
      : energy_(std::move(patterns), Options(beta)), map_(energy_) {}
  Index dimension() const override { return map_.dimension(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override { map_.Evaluate(z, out); }
  bool SupportsSubsets() const override { return map_.SupportsSubsets(); }
  bool SupportsColumnSubsets() const override { return map_.SupportsColumnSubsets(); }
  void EvaluateColumns(ConstMatrixRef<double> z, const std::vector<Index>& columns,
                       MatrixRef<double> out) const override {
    map_.EvaluateColumns(z, columns, out);
  }

 private:
  using Energy = implicit::ModernHopfieldEnergy<double>;
  static Energy::Options Options(double beta) {
    Energy::Options o;
    o.beta = beta;
    return o;
  }
  Energy energy_;
  implicit::CccpMap<double> map_;
};

class Draw {
 public:
  explicit Draw(unsigned seed) : rng_(seed) {}
  double Uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  int Pick(std::initializer_list<int> values) {
    const auto i = std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng_);
    return *(values.begin() + i);
  }
  Matrix<double> Normal(Index rows, Index cols) {
    std::normal_distribution<double> normal;
    Matrix<double> m(rows, cols);
    for (Index j = 0; j < cols; ++j)
      for (Index i = 0; i < rows; ++i) m(i, j) = normal(rng_);
    return m;
  }

 private:
  std::mt19937_64 rng_;
};

std::string Describe(const char* format, double a, double b, double c, double d) {
  char text[160];
  std::snprintf(text, sizeof text, format, a, b, c, d);
  return text;
}

RandomMapCase MakeTanh(Draw& draw, int batch) {
  const int n = draw.Pick({8, 16, 32, 64});
  const double norm = draw.Uniform(0.5, 0.99);
  Matrix<double> w = draw.Normal(n, n);
  w *= norm / implicit::SpectralNorm(w);
  return {"tanh", Describe("tanh n=%g |W|=%.3f", n, norm, 0, 0),
          std::make_shared<TanhMap>(std::move(w), draw.Normal(n, batch)), Matrix<double>::Zero(n, batch)};
}

RandomMapCase MakeAttention(Draw& draw, int batch, double alpha, const char* family) {
  const int n = draw.Pick({8, 16, 32});
  const int patterns = draw.Pick({10, 20, 40});
  const double scale = draw.Uniform(0.3, 0.7), beta = draw.Uniform(1.0, 4.0);
  Matrix<double> p = draw.Normal(n, patterns) * scale;
  Matrix<double> d = p.transpose() * draw.Normal(n, batch);
  return {family,
          Describe((std::string(family) + " n=%g N=%g scale=%.2f beta=%.2f").c_str(), n, patterns, scale, beta),
          std::make_shared<AttentionMap>(std::move(p), beta, alpha, std::move(d)), Matrix<double>::Zero(n, batch)};
}

RandomMapCase MakeMonotone(Draw& draw, int batch) {
  const int n = draw.Pick({8, 16, 32, 64});
  const double m = draw.Uniform(0.2, 1.0);
  const Matrix<double> a = draw.Normal(n, n) * (draw.Uniform(0.3, 1.0) / std::sqrt(n));
  const Matrix<double> b = draw.Normal(n, n) * (draw.Uniform(0.3, 1.0) / std::sqrt(n));
  Matrix<double> monotone = a.transpose() * a + b - b.transpose();
  monotone.diagonal().array() += m;
  // The step that minimises the bound sqrt(1 - 2 a m + a^2 L^2) on the contraction factor.
  const double lipschitz = implicit::SpectralNorm(monotone), step = m / (lipschitz * lipschitz);
  return {"monotone", Describe("monotone n=%g m=%.2f L=%.2f", n, m, lipschitz, 0),
          std::make_shared<MonotoneMap>(std::move(monotone), step, draw.Normal(n, batch)),
          Matrix<double>::Zero(n, batch)};
}

RandomMapCase MakeHopfield(Draw& draw, int batch) {
  const int n = draw.Pick({16, 32, 64});
  const int patterns = draw.Pick({10, 40, 100});
  const double beta = draw.Uniform(1.0, 8.0), noise = draw.Uniform(0.1, 0.8);
  Matrix<double> x = draw.Normal(n, patterns);
  x.colwise().normalize();
  Matrix<double> queries(n, batch);
  for (Index b = 0; b < batch; ++b) queries.col(b) = x.col(b % patterns);
  queries += draw.Normal(n, batch) * (noise / std::sqrt(n));
  return {"hopfield", Describe("hopfield n=%g N=%g beta=%.2f noise=%.2f", n, patterns, beta, noise),
          std::make_shared<HiddenEnergyMap>(std::move(x), beta), std::move(queries)};
}

std::pair<std::string, std::string> SplitSpec(const std::string& spec) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos) return {spec, ""};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

struct Run {
  implicit::Summary summary;
  double seconds;
};

std::vector<Run> RunSolver(const std::vector<RandomMapCase>& cases, const std::string& spec,
                           const SweepSettings& settings) {
  implicit::SolverOptions base;
  base.absolute_tolerance = settings.tolerance;
  base.max_iterations = settings.max_iterations;
  const auto [name, options] = SplitSpec(spec);
  const auto solver = implicit::MakeSolver<double>(name, implicit::ParseOptionList(options), base);
  std::vector<Run> runs;
  for (const RandomMapCase& c : cases) {
    Matrix<double> z = c.initial;
    const auto start = std::chrono::steady_clock::now();
    implicit::Summary summary = solver->Solve(*c.map, z);
    runs.push_back({std::move(summary),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
  }
  return runs;
}

bool Converged(const implicit::Summary& s, int b) {
  return s.sample_status[b] == implicit::TerminationType::kConverged;
}

}  // namespace

std::vector<RandomMapCase> MakeRandomMaps(const SweepSettings& settings) {
  if (settings.maps < 1 || settings.batch < 1)
    throw std::invalid_argument("random maps: maps and batch must be >= 1");
  Draw draw(settings.seed);
  std::vector<RandomMapCase> cases;
  for (int k = 0; k < settings.maps; ++k) {
    switch (k % 5) {
      case 0: cases.push_back(MakeTanh(draw, settings.batch)); break;
      case 1: cases.push_back(MakeAttention(draw, settings.batch, 1.0, "softmax")); break;
      case 2: cases.push_back(MakeAttention(draw, settings.batch, k % 2 == 0 ? 2.0 : 1.5, "entmax")); break;
      case 3: cases.push_back(MakeMonotone(draw, settings.batch)); break;
      default: cases.push_back(MakeHopfield(draw, settings.batch)); break;
    }
  }
  return cases;
}

SweepResult RunSweep(const std::vector<RandomMapCase>& cases, const std::vector<std::string>& solvers,
                     const SweepSettings& settings) {
  SweepResult result;
  result.settings = settings;
  for (const RandomMapCase& c : cases) result.families.push_back(c.family);
  std::vector<std::string> specs = {"picard"};
  for (const std::string& s : solvers)
    if (s != "picard") specs.push_back(s);
  std::vector<Run> picard;
  for (const std::string& spec : specs) {
    const std::vector<Run> runs = RunSolver(cases, spec, settings);
    if (picard.empty()) picard = runs;
    SweepRow row;
    row.solver = spec;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const implicit::Summary& s = runs[k].summary;
      row.samples += s.num_samples();
      row.converged += s.num_converged();
      row.seconds += runs[k].seconds;
      row.map_evaluations.push_back(s.total_sample_evaluations());
      row.evaluations += s.total_sample_evaluations();
      if (s.total_sample_evaluations() > picard[k].summary.total_sample_evaluations()) ++row.maps_more_than_picard;
      for (int b = 0; b < s.num_samples(); ++b) {
        if (Converged(s, b) || !Converged(picard[k].summary, b)) continue;
        ++row.lost;
        char text[200];
        std::snprintf(text, sizeof text, "map %zu (%s): sample %d %s, residual %.3g after %d iterations", k,
                      cases[k].description.c_str(), b, implicit::TerminationTypeToString(s.sample_status[b]),
                      s.sample_residual[b], s.sample_iterations[b]);
        row.lost_at.push_back(text);
      }
    }
    result.rows.push_back(std::move(row));
  }
  return result;
}

std::string SweepTable(const SweepResult& result) {
  const SweepSettings& s = result.settings;
  std::ostringstream out;
  out << "random-map sweep: " << result.families.size() << " maps x " << s.batch << " samples, seed " << s.seed
      << ", tol " << Fmt(s.tolerance) << ", max " << s.max_iterations << " iterations\n";
  const std::size_t maps = result.families.size();
  const double reference = static_cast<double>(result.rows.front().evaluations);
  Table totals({"solver", "converged", "lost", "evaluations", "/picard", "maps>picard", "seconds"},
               {false, true, true, true, true, true, true});
  for (const SweepRow& r : result.rows) {
    totals.AddRow({r.solver, std::to_string(r.converged) + "/" + std::to_string(r.samples), std::to_string(r.lost),
                   std::to_string(r.evaluations), FmtFixed(r.evaluations / reference, 3),
                   std::to_string(r.maps_more_than_picard) + " (" +
                       FmtFixed(100.0 * r.maps_more_than_picard / static_cast<double>(maps), 1) + "%)",
                   FmtFixed(r.seconds, 3)});
  }
  totals.Print(out);
  // Per family: evaluations relative to Picard's.
  std::vector<std::string> families = result.families;
  std::sort(families.begin(), families.end());
  families.erase(std::unique(families.begin(), families.end()), families.end());
  std::vector<std::string> header = {"solver"};
  header.insert(header.end(), families.begin(), families.end());
  std::vector<bool> right_aligned(header.size(), true);
  right_aligned[0] = false;
  Table by_family(header, right_aligned);
  for (const SweepRow& r : result.rows) {
    std::vector<std::string> row = {r.solver};
    for (const std::string& f : families) {
      long long mine = 0, picard = 0;
      for (std::size_t k = 0; k < maps; ++k) {
        if (result.families[k] != f) continue;
        mine += r.map_evaluations[k];
        picard += result.rows.front().map_evaluations[k];
      }
      row.push_back(FmtFixed(static_cast<double>(mine) / static_cast<double>(picard), 3));
    }
    by_family.AddRow(row);
  }
  out << "\nevaluations / picard's, by family:\n";
  by_family.Print(out);
  for (const SweepRow& r : result.rows)
    for (const std::string& l : r.lost_at) out << r.solver << " lost " << l << "\n";
  return out.str();
}

}  // namespace implicit_apps
