// Run-time solver registry: names -> solvers, string options -> Options fields.
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/gradient_flow.h>
#include <implicit/solvers/lbfgs.h>
#include <implicit/solvers/newton.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/internal/option_fields.h>
#include <implicit/solvers/registry.h>

#include <cctype>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace implicit {
namespace {

using internal::OptionFields;
using internal::WithSharedFields;
template <typename O>
using Fields = OptionFields<O>;

template <typename S>
Fields<typename PicardSolver<S>::Options> PicardFields() {
  using O = typename PicardSolver<S>::Options;
  return WithSharedFields<O>({IMPLICIT_OPTION_FIELD(damping)});
}

template <typename S>
Fields<typename AndersonSolver<S>::Options> AndersonFields() {
  using O = typename AndersonSolver<S>::Options;
  return WithSharedFields<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(mixing),
                  IMPLICIT_OPTION_FIELD(ridge), IMPLICIT_OPTION_FIELD(condition_limit),
                  IMPLICIT_OPTION_FIELD(max_predicted_residual), IMPLICIT_OPTION_FIELD(fast_contraction),
                  IMPLICIT_OPTION_FIELD(sufficient_decrease), IMPLICIT_OPTION_FIELD(max_backtracks),
                  IMPLICIT_OPTION_FIELD(backtrack_factor), IMPLICIT_OPTION_FIELD(residual_factor),
                  IMPLICIT_OPTION_FIELD(progress_window), IMPLICIT_OPTION_FIELD(progress_factor),
                  IMPLICIT_OPTION_FIELD(warmup_iterations)});
}

template <typename S>
Fields<typename BroydenSolver<S>::Options> BroydenFields() {
  using O = typename BroydenSolver<S>::Options;
  return WithSharedFields<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(fast_contraction),
                  IMPLICIT_OPTION_FIELD(sufficient_decrease), IMPLICIT_OPTION_FIELD(max_backtracks),
                  IMPLICIT_OPTION_FIELD(backtrack_factor), IMPLICIT_OPTION_FIELD(residual_factor),
                  IMPLICIT_OPTION_FIELD(progress_window), IMPLICIT_OPTION_FIELD(progress_factor),
                  IMPLICIT_OPTION_FIELD(warmup_iterations)});
}

template <typename S>
Fields<typename NewtonSolver<S>::Options> NewtonFields() {
  using O = typename NewtonSolver<S>::Options;
  return WithSharedFields<O>({IMPLICIT_OPTION_FIELD(trust_region),
                  IMPLICIT_OPTION_FIELD(initial_trust_region_radius),
                  IMPLICIT_OPTION_FIELD(dense_jacobian_max_dimension),
                  IMPLICIT_OPTION_FIELD(newton_krylov), IMPLICIT_OPTION_FIELD(max_threads),
                  IMPLICIT_OPTION_FIELD(krylov_restart),
                  IMPLICIT_OPTION_FIELD(max_krylov_iterations),
                  IMPLICIT_OPTION_FIELD(forcing_term), IMPLICIT_OPTION_FIELD(max_backtracks),
                  IMPLICIT_OPTION_FIELD(sufficient_decrease),
                  IMPLICIT_OPTION_FIELD(backtrack_factor)});
}

template <typename S>
Fields<typename LbfgsSolver<S>::Options> LbfgsFields() {
  using O = typename LbfgsSolver<S>::Options;
  return WithSharedFields<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(eigenvalue_scaling),
                  IMPLICIT_OPTION_FIELD(curvature_threshold),
                  IMPLICIT_OPTION_FIELD(sufficient_decrease), IMPLICIT_OPTION_FIELD(max_backtracks),
                  IMPLICIT_OPTION_FIELD(backtrack_factor), IMPLICIT_OPTION_FIELD(residual_factor)});
}

template <typename S>
Fields<typename GradientFlowSolver<S>::Options> GradientFlowFields() {
  using O = typename GradientFlowSolver<S>::Options;
  return WithSharedFields<O>({IMPLICIT_OPTION_FIELD(step_size), IMPLICIT_OPTION_FIELD(check_monotone),
                  IMPLICIT_OPTION_FIELD(monotone_tolerance)});
}

struct Entry {
  const char* name;
  bool needs_energy;
  bool needs_jacobian_products;
};
const Entry kEntries[] = {
    {"picard", false, false}, {"anderson", false, false}, {"broyden", false, false},
    {"newton", false, true},  {"lbfgs", true, false},     {"gradient_flow", true, false},
};

// The solvers added by RegisterSolver, in the order they were added.
struct Registered {
  std::mutex mutex;
  std::vector<SolverRegistration> solvers;
};
Registered& RegisteredSolvers() {
  static Registered registered;
  return registered;
}

const Entry* FindBuiltIn(const std::string& name) {
  for (const Entry& e : kEntries) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

// A copy of the registration of `name`. Throws std::invalid_argument for an
// unknown solver; a built-in one gives a registration without factories.
SolverRegistration FindSolver(const std::string& name) {
  if (const Entry* e = FindBuiltIn(name)) {
    SolverRegistration r;
    r.name = e->name;
    r.library = "libimplicit";
    r.needs_energy = e->needs_energy;
    r.needs_jacobian_products = e->needs_jacobian_products;
    return r;
  }
  {
    Registered& registered = RegisteredSolvers();
    std::lock_guard<std::mutex> lock(registered.mutex);
    for (const SolverRegistration& r : registered.solvers) {
      if (r.name == name) return r;
    }
  }
  throw std::invalid_argument("unknown solver \"" + name + "\"; valid solvers: " +
                              internal::JoinOptionNames(SolverNames()));
}

template <typename SolverT>
struct Tag {
  using type = SolverT;
};

// Calls visit(Tag<SolverT>, fields) for the built-in solver `name`.
template <typename S, typename Visit>
auto Dispatch(const std::string& name, Visit&& visit) {
  if (name == "picard") return visit(Tag<PicardSolver<S>>{}, PicardFields<S>());
  if (name == "anderson") return visit(Tag<AndersonSolver<S>>{}, AndersonFields<S>());
  if (name == "broyden") return visit(Tag<BroydenSolver<S>>{}, BroydenFields<S>());
  if (name == "newton") return visit(Tag<NewtonSolver<S>>{}, NewtonFields<S>());
  if (name == "lbfgs") return visit(Tag<LbfgsSolver<S>>{}, LbfgsFields<S>());
  return visit(Tag<GradientFlowSolver<S>>{}, GradientFlowFields<S>());
}

std::string Trim(const std::string& s) {
  std::size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

}  // namespace

std::vector<std::string> SolverNames() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) names.push_back(e.name);
  Registered& registered = RegisteredSolvers();
  std::lock_guard<std::mutex> lock(registered.mutex);
  for (const SolverRegistration& r : registered.solvers) names.push_back(r.name);
  return names;
}

std::vector<std::string> SolverOptionNames(const std::string& name) {
  const SolverRegistration r = FindSolver(name);
  if (r.library != "libimplicit") return r.option_names;
  return Dispatch<double>(name, [](auto, const auto& fields) { return internal::OptionFieldNames(fields); });
}

bool SolverNeedsEnergy(const std::string& name) { return FindSolver(name).needs_energy; }

bool SolverNeedsJacobianProducts(const std::string& name) {
  return FindSolver(name).needs_jacobian_products;
}

std::string SolverLibrary(const std::string& name) { return FindSolver(name).library; }

void RegisterSolver(SolverRegistration registration) {
  const std::string& name = registration.name;
  if (name.empty() || !registration.make_float || !registration.make_double || registration.library.empty())
    throw std::invalid_argument("RegisterSolver: a registration needs a name, a library and both factories");
  if (FindBuiltIn(name) != nullptr)
    throw std::invalid_argument("RegisterSolver: \"" + name + "\" is a built-in solver's name");
  Registered& registered = RegisteredSolvers();
  std::lock_guard<std::mutex> lock(registered.mutex);
  for (const SolverRegistration& r : registered.solvers) {
    if (r.name == name)
      throw std::invalid_argument("RegisterSolver: \"" + name + "\" is already registered (by " + r.library + ")");
  }
  registered.solvers.push_back(std::move(registration));
}

template <typename Scalar>
std::unique_ptr<Solver<Scalar>> MakeSolver(const std::string& name,
                                           const std::map<std::string, std::string>& options,
                                           const SolverOptions& base) {
  const SolverRegistration r = FindSolver(name);
  if (r.library != "libimplicit") {
    if constexpr (std::is_same_v<Scalar, float>) return r.make_float(options, base);
    else return r.make_double(options, base);
  }
  return Dispatch<Scalar>(name, [&](auto tag, const auto& fields) -> std::unique_ptr<Solver<Scalar>> {
    using SolverT = typename decltype(tag)::type;
    typename SolverT::Options solver_options;
    static_cast<SolverOptions&>(solver_options) = base;
    internal::ApplyOptions(name, fields, options, &solver_options);
    return std::make_unique<SolverT>(solver_options);  // validates the values
  });
}

template std::unique_ptr<Solver<float>> MakeSolver<float>(
    const std::string&, const std::map<std::string, std::string>&, const SolverOptions&);
template std::unique_ptr<Solver<double>> MakeSolver<double>(
    const std::string&, const std::map<std::string, std::string>&, const SolverOptions&);

std::map<std::string, std::string> ParseOptionList(const std::string& list) {
  std::map<std::string, std::string> result;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string entry = Trim(list.substr(start, comma - start));
    start = comma + 1;
    if (entry.empty()) continue;
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      throw std::invalid_argument("option list \"" + list + "\": entry \"" + entry +
                                  "\" is not of the form key=value");
    }
    const std::string key = Trim(entry.substr(0, eq));
    const std::string value = Trim(entry.substr(eq + 1));
    if (key.empty()) {
      throw std::invalid_argument("option list \"" + list + "\": entry \"" + entry +
                                  "\" has an empty key");
    }
    if (!result.emplace(key, value).second) {
      throw std::invalid_argument("option list \"" + list + "\": option \"" + key +
                                  "\" is given twice");
    }
  }
  return result;
}

}  // namespace implicit
