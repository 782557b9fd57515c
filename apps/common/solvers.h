// Forward solvers by name for the apps (through the solver registry), and
// which problems each applies to.
#pragma once

#include "common/app_util.h"

#include <implicit/core/map.h>
#include <implicit/solvers/registry.h>
#include <implicit/solvers/solver.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace implicit_apps {

inline std::vector<std::string> AvailableSolvers() { return implicit::SolverNames(); }

inline std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Throws UsageError for a name that is not a registered solver.
inline void CheckSolverName(const std::string& name) {
  for (const auto& n : AvailableSolvers())
    if (n == name) return;
  throw UsageError("unknown solver '" + name + "' (available: " + JoinNames(AvailableSolvers()) + ")");
}

// Why `solver` cannot run on `map` ("" when it can).
template <typename Scalar>
std::string SkipReason(const std::string& solver, const implicit::FixedPointMap<Scalar>& map) {
  if (implicit::SolverNeedsEnergy(solver) && map.energy() == nullptr)
    return solver + " minimises an energy; this problem is an explicit map without one";
  if (implicit::SolverNeedsJacobianProducts(solver) && !map.HasJacobianProducts())
    return solver + " needs Jacobian-vector products; this map provides none";
  return "";
}

// The solver `name` with the shared options `common` and solver-specific
// string options (registry syntax, e.g. {"memory", "5"}); MakeSolver<float>
// for float problems.
template <typename Scalar = double>
std::unique_ptr<implicit::Solver<Scalar>> MakeSolver(
    const std::string& name, const implicit::SolverOptions& common,
    const std::map<std::string, std::string>& options = {}) {
  CheckSolverName(name);
  return implicit::MakeSolver<Scalar>(name, options, common);
}

}  // namespace implicit_apps
