// Forward solvers by name for the apps (through the solver registry): which
// problems each applies to, and per-solver options from the command line.
#pragma once

#include "common/app_main.h"
#include "common/format.h"

#include <implicit/core/map.h>
#include <implicit/solvers/kinsol.h>
#include <implicit/solvers/petsc.h>
#include <implicit/solvers/registry.h>
#include <implicit/solvers/solver.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {

// Every registered solver: libimplicit's, then the KINSOL and PETSc backends
// this build has (registered here, once).
inline std::vector<std::string> AvailableSolvers() {
  implicit::kinsol::RegisterSolvers();
  implicit::petsc::RegisterSolvers();
  return implicit::SolverNames();
}

// libimplicit's own solvers (the programs' default lists).
inline std::vector<std::string> BuiltInSolvers() {
  std::vector<std::string> names;
  for (const std::string& name : AvailableSolvers())
    if (implicit::SolverLibrary(name) == "libimplicit") names.push_back(name);
  return names;
}

// The solver list of a --solvers option: "all" is every registered solver.
inline void ExpandAllSolvers(std::vector<std::string>* names) {
  if (names->size() == 1 && (*names)[0] == "all") *names = AvailableSolvers();
}

// Throws UsageError for a name that is not a registered solver.
inline void CheckSolverName(const std::string& name) {
  const std::vector<std::string> names = AvailableSolvers();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw UsageError("unknown solver '" + Excerpt(name) + "' (available: " + JoinNames(names) + ")");
}

// A CLI11 check that the option names a registered solver.
inline CLI::Validator SolverNameCheck() {
  return CLI::Validator(
      [](std::string& name) {
        try {
          CheckSolverName(name);
          return std::string();
        } catch (const UsageError& e) {
          return std::string(e.what());
        }
      },
      "");
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

// Solver-specific string options by solver name (registry syntax, e.g.
// {"anderson", {{"memory", "5"}}}).
using SolverOptionMap = std::map<std::string, std::map<std::string, std::string>>;

// Parses --solver-options values "name:key=value,key=value", several per value
// separated by ';' (the option may also be repeated). An unknown solver, a
// malformed list, an unknown key or a bad value is a UsageError naming
// `option`; so is a key given twice for one solver.
inline SolverOptionMap ParseSolverOptions(const std::string& option, const std::vector<std::string>& values) {
  SolverOptionMap out;
  for (const std::string& value : values) {
    std::size_t begin = 0;
    while (begin <= value.size()) {
      const std::size_t end = std::min(value.find(';', begin), value.size());
      const std::string spec = value.substr(begin, end - begin);
      begin = end + 1;
      if (spec.empty()) continue;
      const std::size_t colon = spec.find(':');
      if (colon == std::string::npos)
        throw UsageError(option + ": '" + Excerpt(spec) + "' is not SOLVER:KEY=VALUE,...");
      const std::string name = spec.substr(0, colon);
      try {
        CheckSolverName(name);
        for (const auto& kv : implicit::ParseOptionList(spec.substr(colon + 1)))
          if (!out[name].insert(kv).second) throw std::invalid_argument("'" + kv.first + "' given twice");
        implicit::MakeSolver<double>(name, out[name]);  // checks keys and values
      } catch (const std::exception& e) {  // UsageError or the registry's std::invalid_argument
        throw UsageError(option + ": " + e.what());
      }
    }
  }
  return out;
}

// The solver options the programs set from their flags: the tolerance
// and the iteration budget (--tol, --max-iter), and whether to record the trace.
inline implicit::SolverOptions RunOptions(double tol, long max_iter, bool record_trace) {
  implicit::SolverOptions o;
  o.absolute_tolerance = tol;
  o.max_iterations = static_cast<int>(max_iter);
  o.record_trace = record_trace;
  return o;
}

// The solver `name` with the shared options `common` and its solver-specific
// string options from `options` (none when it has no entry); MakeSolver<float>
// for float problems.
template <typename Scalar = double>
std::unique_ptr<implicit::Solver<Scalar>> MakeSolver(const std::string& name, const implicit::SolverOptions& common,
                                                     const SolverOptionMap& options = {}) {
  CheckSolverName(name);
  const auto it = options.find(name);
  return implicit::MakeSolver<Scalar>(name, it == options.end() ? std::map<std::string, std::string>{} : it->second,
                                      common);
}

}  // namespace implicit_apps
