// The registry of built-in problems. A problem is one file
// apps/problems/<name>.cc (compiled into every app that uses problems, see
// apps/CMakeLists.txt) that defines a ProblemT<S> subclass template and
// registers it:
//
//   template <typename S> class MyProblemT : public ProblemT<S> { ... };
//   const bool kMyProblemRegistered = RegisterProblem<MyProblemT>([] {  // (a name of its own:
//                                             // the problems compile as one unit, IMPLICIT_UNITY_BUILD)
//     ProblemInfo p;
//     p.name = "my-problem";
//     p.order = 60;
//     p.summary = "what it solves, one line for --help";
//     p.floor = "the products its floor times, one line";
//     p.parameters = {{"my-scale", 0.5, "scale of my-problem", "> 0", [](double v) { return v > 0; }}};
//     return p;
//   }());
//
// --problem, --help, the JSON settings, --list-problems (which the app tests
// read) and the problem's own options (--my-scale) then follow from it.
#pragma once

#include "problems/problem.h"

#include <implicit/core/digits.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace implicit_apps {

// A problem's own real-valued setting: the option --name, the JSON settings
// key name with '-' as '_', read by ProblemSettings::Parameter(name).
struct ProblemParameter {
  std::string name;
  double default_value = 0;
  std::string help;
  std::string bound;                  // what `valid` asks, e.g. "> 0"; "" = any finite number
  std::function<bool(double)> valid;  // empty: any finite number
};

template <typename S>
using ProblemFactory =
    std::function<std::unique_ptr<ProblemT<S>>(const implicit::DigitsDataset&, const ProblemSettings&)>;

struct ProblemInfo {
  std::string name;
  int order = 0;            // position in lists and default runs (ascending)
  std::string summary;      // one line for --help
  std::string floor;        // the products its floor times, one line (implicit-bench --help)
  int bench_patterns = 0;   // implicit-bench's default --patterns; 0 = all digits
  std::vector<ProblemParameter> parameters;
  // Why the settings cannot give a finite computation in `scalar` (a message
  // naming the option, ScaleRangeError), or "". Empty: always finite.
  std::function<std::string(const implicit::DigitsDataset&, const ProblemSettings&, const ScalarRange& scalar)>
      finite_check;
  ProblemFactory<double> make_double;
  ProblemFactory<float> make_float;
};

// Adds a problem (at static initialisation); throws on a repeated name.
bool RegisterProblemInfo(ProblemInfo info);

// Registers Problem<double> and Problem<float> under `info`.
template <template <typename> class Problem>
bool RegisterProblem(ProblemInfo info) {
  info.make_double = [](const implicit::DigitsDataset& d, const ProblemSettings& s) {
    return std::unique_ptr<ProblemT<double>>(new Problem<double>(d, s));
  };
  info.make_float = [](const implicit::DigitsDataset& d, const ProblemSettings& s) {
    return std::unique_ptr<ProblemT<float>>(new Problem<float>(d, s));
  };
  return RegisterProblemInfo(std::move(info));
}

// Every registered problem, by `order`.
const std::vector<ProblemInfo>& RegisteredProblems();
std::vector<std::string> ProblemNames();
// The problem `name`; throws UsageError listing the names for an unknown one.
const ProblemInfo& FindProblem(const std::string& name);
// Every problem parameter once (the first problem to declare a name wins).
std::vector<ProblemParameter> ProblemParameters();

// The problem `name` built in S; throws UsageError for an unknown name.
template <typename S>
std::unique_ptr<ProblemT<S>> MakeProblemOf(const std::string& name, const implicit::DigitsDataset& digits,
                                           const ProblemSettings& s) {
  static_assert(std::is_same<S, double>::value || std::is_same<S, float>::value, "double or float");
  const ProblemInfo& info = FindProblem(name);
  if constexpr (std::is_same<S, float>::value) {
    return info.make_float(digits, s);
  } else {
    return info.make_double(digits, s);
  }
}

}  // namespace implicit_apps
