// The command-line options of the apps that run the registered problems
// (implicit-compare, implicit-bench): --problem, --list-problems and each
// problem's own parameters, all taken from the registry.
#pragma once

#include "common/cli.h"
#include "common/json_output.h"
#include "problems/registry.h"

#include <iostream>
#include <string>
#include <vector>

namespace implicit_apps {

struct ProblemSelection {
  std::vector<std::string> names = ProblemNames();  // --problem
  bool list = false;                                // --list-problems
  ProblemSettings settings;                         // the problems' own parameters
};

// Adds --problem (its help lists every problem: name, summary and, when
// `with_floor`, the products of its floor), --list-problems and one option
// per problem parameter, bound to p->settings.parameters.
inline void AddProblemOptions(CLI::App& app, ProblemSelection* p, bool with_floor) {
  std::string help = "comma-separated problems:";
  for (const ProblemInfo& info : RegisteredProblems()) {
    help += "\n  " + info.name + std::string(info.name.size() < 17 ? 17 - info.name.size() : 1, ' ') +
            info.summary;
    if (with_floor) help += "; floor: " + info.floor;
  }
  AddList(app, "--problem", &p->names, help, "all");
  app.add_flag("--list-problems", p->list, "print the problem names, one per line, and exit");
  for (const ProblemParameter& q : ProblemParameters()) {
    double& value = p->settings.parameters[q.name];
    value = q.default_value;
    app.add_option("--" + q.name, value, q.help)->check(RealCheck(q.valid, q.bound));
  }
}

// The options implicit-compare and implicit-bench share, with the same text
// in both: --tol and --max-iter of every solve (RunOptions, common/solvers.h),
// --beta of the Hopfield-type problems (bound to p->settings.beta, whose
// value is the default) and --seed of the problems' random weights.
inline void AddToleranceOptions(CLI::App& app, double* tol, long* max_iter) {
  app.add_option("--tol", *tol, "absolute residual tolerance |f(z) - z| per sample")->check(Positive());
  app.add_option("--max-iter", *max_iter, "iteration budget per solve")->check(IntIn(1, 1000000));
}
inline void AddBetaOption(CLI::App& app, ProblemSelection* p) {
  app.add_option("--beta", p->settings.beta, "inverse temperature of the Hopfield-type problems")
      ->check(Positive());
}
inline void AddSeedOption(CLI::App& app, long* seed) {
  app.add_option("--seed", *seed, "seed of the random weights")->check(IntIn(0, 4294967295L));
}

// After parsing: expands "all" (the default the help shows) to every problem,
// checks the names (UsageError for an unknown one); prints the names and
// returns false for --list-problems.
inline bool CheckProblemSelection(ProblemSelection& p) {
  if (p.names.size() == 1 && p.names[0] == "all") p.names = ProblemNames();
  if (p.list) {
    for (const std::string& name : ProblemNames()) std::cout << name << "\n";
    return false;
  }
  for (const std::string& name : p.names) FindProblem(name);
  return true;
}

// UsageError when the problem `name` with settings `s` cannot give a finite
// computation in double (and in float when `with_float`), with the reason:
// checked before anything runs, instead of reporting inf or nan later.
inline void CheckFiniteSettings(const std::string& name, const implicit::DigitsDataset& digits,
                                const ProblemSettings& s, bool with_float) {
  const ProblemInfo& info = FindProblem(name);
  if (!info.finite_check) return;
  for (const ScalarRange& scalar : {RangeOf<double>(), RangeOf<float>()}) {
    if (scalar.name == "float" && !with_float) continue;
    const std::string error = info.finite_check(digits, s, scalar);
    if (!error.empty()) throw UsageError(error + " (problem " + name + ")");
  }
}

// The problem parameters as JSON settings fields ("spectral-norm" ->
// "spectral_norm").
inline void AddProblemParametersJson(const ProblemSettings& s, Json* settings) {
  for (const ProblemParameter& q : ProblemParameters()) {
    std::string key = q.name;
    for (char& c : key) c = c == '-' ? '_' : c;
    (*settings)[key] = s.Parameter(q.name);
  }
}

}  // namespace implicit_apps
