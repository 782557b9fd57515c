// Random user-like maps and the solver sweep over them: the conformance sweep
// of test/solvers/random_map_sweep_test.cc and `implicit-bench --sweep`.
//
// The maps are what a DEQ researcher writes first, handed to the solvers as
// plain maps (no energy, no Jacobian products), each with a per-sample input:
//   tanh       z = tanh(W z + c_b),  |W|_2 = s in [0.5, 0.99]  (contractive to
//              nearly non-expansive)
//   softmax    z = P softmax(beta P^T z + P^T x_b), P = randn (n x N) * scale,
//              beta in [1, 4]   (attention with input injection)
//   entmax     the same with sparsemax or 1.5-entmax weights
//   monotone   z = relu(z - a ((I - W) z - c_b)), I - W = m I + A^T A + B - B^T
//              (a monotone-operator DEQ's forward-backward splitting step)
//   hopfield   the library's CccpMap of a ModernHopfieldEnergy with its energy
//              hidden (random unit patterns, beta in [1, 8], noisy queries)
// Every solver runs from the same start with the same tolerance and iteration
// budget; the sweep counts, per solver, the samples it converged, the samples
// Picard converged that it did not ("lost"), its column evaluations of f in
// total, and the maps on which it spent more evaluations than Picard.
//
//   implicit_apps::SweepSettings settings;       // 75 maps x 16 samples, tol 1e-8
//   auto cases = implicit_apps::MakeRandomMaps(settings);
//   implicit_apps::SweepResult r = implicit_apps::RunSweep(cases, {"picard", "anderson"}, settings);
//   std::cout << implicit_apps::SweepTable(r);
#pragma once

#include <implicit/core/map.h>
#include <implicit/core/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace implicit_apps {

struct SweepSettings {
  int maps = 75;            // cycled through the five families
  int batch = 16;           // samples per map
  unsigned seed = 1;
  double tolerance = 1e-8;  // absolute residual tolerance
  int max_iterations = 3000;
};

// One random map and its starting batch (n x batch).
struct RandomMapCase {
  std::string family;       // tanh, softmax, entmax, monotone, hopfield
  std::string description;  // its drawn sizes and scales
  std::shared_ptr<const implicit::FixedPointMap<double>> map;
  implicit::Matrix<double> initial;
};

std::vector<RandomMapCase> MakeRandomMaps(const SweepSettings& settings);

// What one solver did over the sweep.
struct SweepRow {
  std::string solver;  // the label: the solver's name, or name:options
  int samples = 0;
  int converged = 0;
  int lost = 0;                   // converged by Picard, not by this solver
  long long evaluations = 0;      // columns of f evaluated, all maps
  int maps_more_than_picard = 0;  // maps where it evaluated more columns than Picard
  double seconds = 0.0;
  std::vector<long long> map_evaluations;  // per map
  std::vector<std::string> lost_at;        // "map k (family): sample b status r=..."
};

struct SweepResult {
  SweepSettings settings;
  std::vector<std::string> families;  // per map
  std::vector<SweepRow> rows;         // rows[0] is Picard (the reference)
};

// Runs Picard first, then each solver ("name" or "name:key=value,key=value")
// on every case. Throws std::invalid_argument for an unknown solver or option.
SweepResult RunSweep(const std::vector<RandomMapCase>& cases, const std::vector<std::string>& solvers,
                     const SweepSettings& settings);

// The table: per solver, converged/samples, lost, evaluations (and / Picard's),
// maps with more evaluations than Picard; then per family.
std::string SweepTable(const SweepResult& result);

}  // namespace implicit_apps
