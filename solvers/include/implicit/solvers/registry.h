/// \file
/// Run-time selection of forward solvers by name, for apps and experiments.
///
/// Solvers: "picard", "anderson", "broyden" (fixed-point methods, any map),
/// "newton" (needs Jacobian-vector products), "lbfgs" and "gradient_flow"
/// (need a map built from an energy, see energy_maps.h). Options are given as
/// strings keyed by the field names of the solver's Options struct: the shared
/// ones (max_iterations, absolute_tolerance, relative_tolerance,
/// max_stall_iterations, divergence_threshold, record_trace) and the solver's
/// own (e.g. anderson's memory, mixing). Nothing is silently ignored: an
/// unknown solver, an unknown key or a malformed value throws
/// std::invalid_argument that names it and lists what is valid; values are
/// then range-checked by the solver's Options::IsValid.
///
/// \code
///   auto options = implicit::ParseOptionList("memory=5,mixing=0.5");
///   implicit::SolverOptions base;
///   base.absolute_tolerance = 1e-10;
///   std::unique_ptr<implicit::Solver<double>> solver =
///       implicit::MakeSolver<double>("anderson", options, base);
///   implicit::Summary summary = solver->Solve(map, z);
/// \endcode
///
/// Value syntax: integers and reals as in C (e.g. 100, 1e-8, 0.5); booleans
/// true/false, 1/0, yes/no, on/off; strings verbatim (e.g.
/// trust_region=dogleg).
///
/// Solvers from other libraries join the registry at run time
/// (RegisterSolver): the SUNDIALS KINSOL and PETSc SNES backends
/// (implicit::kinsol::RegisterSolvers(), implicit::petsc::RegisterSolvers() in
/// kinsol.h and petsc.h), or a user's own. SolverNames() lists them after the
/// built-in ones; SolverLibrary() says whose each one is.
#pragma once

#include <implicit/solvers/solver.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace implicit {

/// The registered solver names: picard, anderson, broyden, newton, lbfgs,
/// gradient_flow, then those added by RegisterSolver in the order they were added.
std::vector<std::string> SolverNames();

/// Who implements the solver: "libimplicit" for the built-in ones, else the
/// registration's library (e.g. "SUNDIALS KINSOL 6.4.1").
/// \throws std::invalid_argument for an unknown solver.
std::string SolverLibrary(const std::string& name);

/// Builds a registered solver from its string options on top of `base` (the
/// shared fields), as MakeSolver does.
template <typename Scalar>
using SolverFactory = std::function<std::unique_ptr<Solver<Scalar>>(
    const std::map<std::string, std::string>& options, const SolverOptions& base)>;
/// A solver from outside the built-in set, reachable by name like them once
/// passed to RegisterSolver.
struct SolverRegistration {
  std::string name;     ///< the name MakeSolver takes (must not be taken)
  std::string library;  ///< who implements it, e.g. "PETSc 3.18.5"
  bool needs_energy = false;             ///< the solver needs map.energy() (SolverNeedsEnergy)
  bool needs_jacobian_products = false;  ///< the solver needs the map's Jacobian-vector products
  std::vector<std::string> option_names;  ///< every key the factories accept
  ///@{
  /// Build the solver (in float, in double) as MakeSolver does: `base` for the
  /// shared fields, the string options on top; throw std::invalid_argument for
  /// an unknown key or a bad value.
  SolverFactory<float> make_float;
  SolverFactory<double> make_double;
  ///@}
};

/// Adds a solver to the registry (thread-safe).
/// \throws std::invalid_argument for a registration without a name, library
///         or factory, and for a name that is taken (built-in or registered before).
void RegisterSolver(SolverRegistration registration);

/// The option keys `name` accepts (shared ones first).
/// \throws std::invalid_argument for an unknown solver.
std::vector<std::string> SolverOptionNames(const std::string& name);

///@{
/// Whether the solver needs map.energy() (lbfgs, gradient_flow) or the map's
/// Jacobian-vector products (newton).
/// \throws std::invalid_argument for an unknown solver.
bool SolverNeedsEnergy(const std::string& name);
bool SolverNeedsJacobianProducts(const std::string& name);
///@}

/// Builds the solver `name` with `base` for the shared fields (including the
/// callback), then the string `options` applied on top. Instantiated for
/// float and double.
/// \throws std::invalid_argument for an unknown name (listing the valid
///         names), an unknown key (listing the solver's keys), a malformed
///         value (naming key and value) or an out-of-range value (the
///         solver's own validation).
template <typename Scalar>
std::unique_ptr<Solver<Scalar>> MakeSolver(const std::string& name,
                                           const std::map<std::string, std::string>& options = {},
                                           const SolverOptions& base = {});

/// Parses "key=value,key=value" (whitespace around keys and values is ignored;
/// values cannot contain ','). The empty string gives an empty map.
/// \throws std::invalid_argument for an entry without '=', an empty key or a
///         repeated key.
std::map<std::string, std::string> ParseOptionList(const std::string& list);

/// \cond INTERNAL
extern template std::unique_ptr<Solver<float>> MakeSolver<float>(
    const std::string&, const std::map<std::string, std::string>&, const SolverOptions&);
extern template std::unique_ptr<Solver<double>> MakeSolver<double>(
    const std::string&, const std::map<std::string, std::string>&, const SolverOptions&);
/// \endcond

}  // namespace implicit
