// implicit-hopfield capacity (hopfield/capacity.h): its options, the random
// patterns and probes, the retrieval rates, the table and the JSON.
#include "hopfield/capacity.h"

#include "common/cli.h"
#include "common/format.h"
#include "common/progress.h"
#include "common/table.h"

#include <implicit/layers/dense_associative_memory.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {

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

namespace {

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

}  // namespace

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

}  // namespace implicit_apps
