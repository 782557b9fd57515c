// String options -> Options fields (internal): the parsing behind MakeSolver
// (registry.h), shared by the built-in solvers and the backend solvers
// (kinsol.h, petsc.h) so that every solver reads "key=value" the same way.
//
//   using O = PicardSolver<double>::Options;
//   OptionFields<O> fields = WithSharedFields<O>({IMPLICIT_OPTION_FIELD(damping)});
//   O options;
//   ApplyOptions("picard", fields, {{"damping", "0.5"}}, &options);  // throws std::invalid_argument
//
// Value syntax: integers and reals as in C (100, 1e-8, 0.5); booleans
// true/false, 1/0, yes/no, on/off (any case); strings verbatim.
#pragma once

#include <implicit/solvers/solver.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace implicit {
namespace internal {

// Thrown by a value parser; `expected` describes the wanted syntax.
struct BadOptionValue {
  std::string expected;
};

template <typename T>
T ParseOptionValue(const std::string& text);

template <>
inline int ParseOptionValue<int>(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || value < INT_MIN ||
      value > INT_MAX) {
    throw BadOptionValue{"an integer"};
  }
  return static_cast<int>(value);
}

template <>
inline double ParseOptionValue<double>(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) ||
      end != text.c_str() + text.size() || errno == ERANGE) {
    throw BadOptionValue{"a real number"};
  }
  return value;
}

template <>
inline bool ParseOptionValue<bool>(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  throw BadOptionValue{"a boolean (true/false, 1/0, yes/no, on/off)"};
}

template <>
inline std::string ParseOptionValue<std::string>(const std::string& text) {
  return text;
}

// One settable field of an Options struct O.
template <typename O>
struct OptionField {
  std::string name;
  std::function<void(O&, const std::string&)> set;
};
template <typename O>
using OptionFields = std::vector<OptionField<O>>;

template <typename O, typename Get>
OptionField<O> MakeOptionField(const char* name, Get get) {
  return {name, [get](O& options, const std::string& text) {
            auto& field = get(options);
            field = ParseOptionValue<std::decay_t<decltype(field)>>(text);
          }};
}

// The field `field` of the Options type named O in the enclosing scope.
#define IMPLICIT_OPTION_FIELD(field) \
  ::implicit::internal::MakeOptionField<O>(#field, [](O& o) -> decltype((o.field)) { return o.field; })

// The SolverOptions fields every solver accepts, then `own`.
template <typename O>
OptionFields<O> WithSharedFields(OptionFields<O> own) {
  OptionFields<O> all = {IMPLICIT_OPTION_FIELD(max_iterations),       IMPLICIT_OPTION_FIELD(max_evaluations),
                         IMPLICIT_OPTION_FIELD(absolute_tolerance),   IMPLICIT_OPTION_FIELD(relative_tolerance),
                         IMPLICIT_OPTION_FIELD(max_stall_iterations), IMPLICIT_OPTION_FIELD(divergence_threshold),
                         IMPLICIT_OPTION_FIELD(record_trace),         IMPLICIT_OPTION_FIELD(use_energy)};
  for (OptionField<O>& f : own) all.push_back(std::move(f));
  return all;
}

template <typename O>
std::vector<std::string> OptionFieldNames(const OptionFields<O>& fields) {
  std::vector<std::string> names;
  for (const OptionField<O>& f : fields) names.push_back(f.name);
  return names;
}

inline std::string JoinOptionNames(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

// Sets options' fields from `values`. Throws std::invalid_argument("<solver>:
// ...") for an unknown key (listing the valid ones) or a malformed value.
template <typename O>
void ApplyOptions(const std::string& solver, const OptionFields<O>& fields,
                  const std::map<std::string, std::string>& values, O* options) {
  for (const auto& [key, value] : values) {
    auto field = std::find_if(fields.begin(), fields.end(), [&key = key](const auto& f) { return f.name == key; });
    if (field == fields.end()) {
      throw std::invalid_argument(solver + ": unknown option \"" + key +
                                  "\"; valid options: " + JoinOptionNames(OptionFieldNames(fields)));
    }
    try {
      field->set(*options, value);
    } catch (const BadOptionValue& bad) {
      throw std::invalid_argument(solver + ": option " + key + "=\"" + value + "\": expected " + bad.expected);
    }
  }
}

}  // namespace internal
}  // namespace implicit
