// implicit-compare's command line (compare/options.h).
#include "compare/options.h"

#include "common/cli.h"
#include "common/output_files.h"
#include "common/solvers.h"
#include "problems/problem_options.h"

#include <algorithm>
#include <string>

namespace implicit_apps {

bool ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app("Runs forward solvers on built-in equilibrium problems and compares them.", "implicit-compare");
  ConfigureApp(app);
  AddProblemOptions(app, &o->problems, false);
  AddList(app, "--solvers", &o->solvers,
          "comma-separated solver names, or all: libimplicit's and the\n"
          "KINSOL / PETSc backends built in (kinsol-*, petsc-*)",
          "libimplicit's");
  app.add_option("--solver-options", o->solver_option_values,
                 "solver-specific options SOLVER:KEY=VALUE,... (registry keys, e.g.\n"
                 "anderson:memory=10,mixing=0.5); repeat it or separate solvers by ';'")
      ->allow_extra_args(false)
      ->default_str("");
  AddToleranceOptions(app, &o->tol, &o->max_iter);
  AddBetaOption(app, &o->problems);
  app.add_option("--patterns", o->patterns, "digits stored / samples per problem, up to 1797")
      ->check(IntIn(1, 1000000));
  AddSeedOption(app, &o->seed);
  app.add_option("--data", o->data, "digits.csv.gz, or a directory holding it")->default_str("")->check(PathCheck());
  app.add_option("--json", o->json, "write {\"settings\": ..., \"results\": [...]}, one result per (problem, solver)")
      ->check(PathCheck());
  app.add_option("--csv", o->csv, "write the table as CSV")->check(PathCheck());
  app.add_option("--plot", o->plot, "draw residual vs iteration and vs time (.png or .svg, needs gnuplot)")
      ->check(ExtensionCheck({".png", ".svg"}));
  app.add_flag("--quiet", o->quiet, "no progress line on stderr");
  app.add_option("--device", o->device,
                 "cpu, or cuda: the problems with a device map (hopfield-digits,\n"
                 "sparse-hopfield with alpha 2) on the GPU with the device solvers\n"
                 "(picard, anderson); the other runs are reported as skipped")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  if (!Parse(app, argc, argv) || !CheckProblemSelection(o->problems)) return false;
  ExpandAllSolvers(&o->solvers);
  for (const std::string& s : o->solvers) CheckSolverName(s);
  o->solver_options = ParseSolverOptions("--solver-options", o->solver_option_values);
  for (const auto& entry : o->solver_options)
    Require(std::find(o->solvers.begin(), o->solvers.end(), entry.first) != o->solvers.end(),
            "--solver-options: solver '" + entry.first + "' is not among --solvers");
  o->problems.settings.seed = static_cast<unsigned>(o->seed);
  CheckWritable(o->json, "--json");
  CheckWritable(o->csv, "--csv");
  CheckWritable(o->plot, "--plot");
  CheckDistinctFiles({{"--json", o->json}, {"--csv", o->csv}, {"--plot", o->plot}}, {{"--data", o->data}});
  return true;
}

}  // namespace implicit_apps
