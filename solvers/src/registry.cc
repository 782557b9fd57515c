// Run-time solver registry: names -> solvers, string options -> Options fields.
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/gradient_flow.h>
#include <implicit/solvers/lbfgs.h>
#include <implicit/solvers/newton.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/registry.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace implicit {
namespace {

// Thrown by a value parser; `expected` describes the wanted syntax.
struct BadValue {
  std::string expected;
};

template <typename T>
T ParseValue(const std::string& text);

template <>
int ParseValue<int>(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE ||
      value < INT_MIN || value > INT_MAX) {
    throw BadValue{"an integer"};
  }
  return static_cast<int>(value);
}

template <>
double ParseValue<double>(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) ||
      end != text.c_str() + text.size() || errno == ERANGE) {
    throw BadValue{"a real number"};
  }
  return value;
}

template <>
bool ParseValue<bool>(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  throw BadValue{"a boolean (true/false, 1/0, yes/no, on/off)"};
}

template <>
std::string ParseValue<std::string>(const std::string& text) {
  return text;
}

// One settable field of an Options struct O.
template <typename O>
struct Field {
  std::string name;
  std::function<void(O&, const std::string&)> set;
};
template <typename O>
using Fields = std::vector<Field<O>>;

template <typename O, typename Get>
Field<O> MakeField(const char* name, Get get) {
  return {name, [get](O& options, const std::string& text) {
            auto& field = get(options);
            field = ParseValue<std::decay_t<decltype(field)>>(text);
          }};
}

#define IMPLICIT_OPTION_FIELD(field) \
  MakeField<O>(#field, [](O& o) -> decltype((o.field)) { return o.field; })

template <typename O>
Fields<O> SharedFields() {
  return {IMPLICIT_OPTION_FIELD(max_iterations),       IMPLICIT_OPTION_FIELD(max_evaluations),
          IMPLICIT_OPTION_FIELD(absolute_tolerance),
          IMPLICIT_OPTION_FIELD(relative_tolerance),   IMPLICIT_OPTION_FIELD(max_stall_iterations),
          IMPLICIT_OPTION_FIELD(divergence_threshold), IMPLICIT_OPTION_FIELD(record_trace),
          IMPLICIT_OPTION_FIELD(use_energy)};
}

template <typename O>
Fields<O> With(Fields<O> own) {
  Fields<O> all = SharedFields<O>();
  for (Field<O>& f : own) all.push_back(std::move(f));
  return all;
}

template <typename S>
Fields<typename PicardSolver<S>::Options> PicardFields() {
  using O = typename PicardSolver<S>::Options;
  return With<O>({IMPLICIT_OPTION_FIELD(damping)});
}

template <typename S>
Fields<typename AndersonSolver<S>::Options> AndersonFields() {
  using O = typename AndersonSolver<S>::Options;
  return With<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(mixing),
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
  return With<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(fast_contraction),
                  IMPLICIT_OPTION_FIELD(sufficient_decrease), IMPLICIT_OPTION_FIELD(max_backtracks),
                  IMPLICIT_OPTION_FIELD(backtrack_factor), IMPLICIT_OPTION_FIELD(residual_factor),
                  IMPLICIT_OPTION_FIELD(progress_window), IMPLICIT_OPTION_FIELD(progress_factor),
                  IMPLICIT_OPTION_FIELD(warmup_iterations)});
}

template <typename S>
Fields<typename NewtonSolver<S>::Options> NewtonFields() {
  using O = typename NewtonSolver<S>::Options;
  return With<O>({IMPLICIT_OPTION_FIELD(trust_region),
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
  return With<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(eigenvalue_scaling),
                  IMPLICIT_OPTION_FIELD(curvature_threshold),
                  IMPLICIT_OPTION_FIELD(sufficient_decrease), IMPLICIT_OPTION_FIELD(max_backtracks),
                  IMPLICIT_OPTION_FIELD(backtrack_factor), IMPLICIT_OPTION_FIELD(residual_factor)});
}

template <typename S>
Fields<typename GradientFlowSolver<S>::Options> GradientFlowFields() {
  using O = typename GradientFlowSolver<S>::Options;
  return With<O>({IMPLICIT_OPTION_FIELD(step_size), IMPLICIT_OPTION_FIELD(check_monotone),
                  IMPLICIT_OPTION_FIELD(monotone_tolerance)});
}

#undef IMPLICIT_OPTION_FIELD

struct Entry {
  const char* name;
  bool needs_energy;
  bool needs_jacobian_products;
};
const Entry kEntries[] = {
    {"picard", false, false}, {"anderson", false, false}, {"broyden", false, false},
    {"newton", false, true},  {"lbfgs", true, false},     {"gradient_flow", true, false},
};

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

const Entry& FindEntry(const std::string& name) {
  for (const Entry& e : kEntries) {
    if (name == e.name) return e;
  }
  throw std::invalid_argument("unknown solver \"" + name + "\"; valid solvers: " +
                              JoinNames(SolverNames()));
}

template <typename SolverT>
struct Tag {
  using type = SolverT;
};

// Calls visit(Tag<SolverT>, fields) for the solver `name`.
template <typename S, typename Visit>
auto Dispatch(const std::string& name, Visit&& visit) {
  const std::string canonical = FindEntry(name).name;
  if (canonical == "picard") return visit(Tag<PicardSolver<S>>{}, PicardFields<S>());
  if (canonical == "anderson") return visit(Tag<AndersonSolver<S>>{}, AndersonFields<S>());
  if (canonical == "broyden") return visit(Tag<BroydenSolver<S>>{}, BroydenFields<S>());
  if (canonical == "newton") return visit(Tag<NewtonSolver<S>>{}, NewtonFields<S>());
  if (canonical == "lbfgs") return visit(Tag<LbfgsSolver<S>>{}, LbfgsFields<S>());
  return visit(Tag<GradientFlowSolver<S>>{}, GradientFlowFields<S>());
}

template <typename O>
std::vector<std::string> NamesOf(const Fields<O>& fields) {
  std::vector<std::string> names;
  for (const Field<O>& f : fields) names.push_back(f.name);
  return names;
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
  return names;
}

std::vector<std::string> SolverOptionNames(const std::string& name) {
  return Dispatch<double>(name, [](auto, const auto& fields) { return NamesOf(fields); });
}

bool SolverNeedsEnergy(const std::string& name) { return FindEntry(name).needs_energy; }

bool SolverNeedsJacobianProducts(const std::string& name) {
  return FindEntry(name).needs_jacobian_products;
}

template <typename Scalar>
std::unique_ptr<Solver<Scalar>> MakeSolver(const std::string& name,
                                           const std::map<std::string, std::string>& options,
                                           const SolverOptions& base) {
  return Dispatch<Scalar>(name, [&](auto tag, const auto& fields)
                                    -> std::unique_ptr<Solver<Scalar>> {
    using SolverT = typename decltype(tag)::type;
    typename SolverT::Options solver_options;
    static_cast<SolverOptions&>(solver_options) = base;
    for (const auto& [key, value] : options) {
      auto field = std::find_if(fields.begin(), fields.end(),
                                [&key = key](const auto& f) { return f.name == key; });
      if (field == fields.end()) {
        throw std::invalid_argument(name + ": unknown option \"" + key +
                                    "\"; valid options: " + JoinNames(NamesOf(fields)));
      }
      try {
        field->set(solver_options, value);
      } catch (const BadValue& bad) {
        throw std::invalid_argument(name + ": option " + key + "=\"" + value +
                                    "\": expected " + bad.expected);
      }
    }
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
