// End-to-end runs of implicit-bench at tiny sizes: the JSON holds the machine
// (core count, build flags), one floor per (problem, precision) and one row per
// (problem, precision, solver) with sane counts and a positive, finite ratio to
// the floor; bad flags are a one-line error naming the flag with exit status 2.
// Nothing here is timed: no assertion compares speeds.
#define BOOST_TEST_MODULE bench
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include <implicit/core/autodiff_energy.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

using implicit::testing::CountLines;
using implicit::testing::Json;
using implicit::testing::ReadFile;
using implicit::testing::RunCommand;
using implicit::testing::ScratchDir;

#ifdef IMPLICIT_APP_BENCH
namespace {

const std::string kApp = IMPLICIT_APP_BENCH;

bool PositiveFinite(const Json& v) { return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0; }

// Bad arguments: exit status 2 (not a signal), one line on stderr naming `expect`.
void ExpectUsageError(const std::string& args, const std::string& expect, int status = 2) {
  implicit::testing::ExpectOneLineError(kApp + " --quiet " + args, expect, status, "implicit-bench");
}

// Checks one floor of the JSON's "floors".
void CheckFloor(const Json& f, double samples, double repeat) {
  BOOST_TEST(f.at("samples").get<double>() == samples);
  BOOST_TEST(f.at("dimension").get<double>() >= 1.0);
  BOOST_TEST(PositiveFinite(f.at("floor").at("seconds")));
  BOOST_TEST(PositiveFinite(f.at("floor").at("flops")));
  BOOST_TEST(PositiveFinite(f.at("floor").at("gflops_per_second")));
  BOOST_TEST(f.at("floor").at("repetitions").size() == static_cast<std::size_t>(repeat));
  BOOST_TEST(!f.at("floor").at("products").get<std::string>().empty());
  BOOST_TEST(!f.at("floor").at("note").get<std::string>().empty());
  BOOST_TEST(PositiveFinite(f.at("map").at("seconds")));
}

// Checks one row of the JSON's "results".
void CheckRow(const Json& row, double samples) {
  for (const char* field : {"problem", "precision", "solver", "status", "samples", "converged_samples",
                            "tolerance", "floor_seconds"})
    BOOST_REQUIRE_MESSAGE(row.contains(field), "missing field " << field);
  const std::string status = row.at("status").get<std::string>();
  BOOST_TEST(implicit::testing::RunStatuses().count(status) == 1u);
  const double B = row.at("samples").get<double>(), converged = row.at("converged_samples").get<double>();
  BOOST_TEST(B == samples);
  BOOST_TEST(converged >= 0.0);
  BOOST_TEST(converged <= B);
  BOOST_TEST(PositiveFinite(row.at("floor_seconds")));
  if (status == "skipped") {
    BOOST_TEST(!row.at("message").get<std::string>().empty());
    return;
  }
  BOOST_REQUIRE(status != "invalid_input");
  for (const char* field : {"iterations", "function_evaluations", "sample_evaluations", "evals_counted",
                            "seconds", "seconds_per_sample_evaluation", "ratio_to_floor"})
    BOOST_REQUIRE_MESSAGE(row.contains(field), "missing field " << field);
  BOOST_TEST((status == "converged") == (converged == B));
  const double evals = row.at("function_evaluations").get<double>(), sample_evals = row.at("sample_evaluations").get<double>();
  BOOST_TEST(evals >= 1.0);
  BOOST_TEST(sample_evals >= 1.0);
  BOOST_TEST(sample_evals <= evals * B);  // at most B columns per batch evaluation
  const std::string counted = row.at("evals_counted").get<std::string>();
  BOOST_TEST((counted == "per_sample" || counted == "function_evaluations_x_B"));
  if (counted == "function_evaluations_x_B") BOOST_TEST(sample_evals == evals * B);
  BOOST_TEST(row.at("seconds").get<double>() >= 0.0);
  BOOST_TEST(PositiveFinite(row.at("ratio_to_floor")));
  BOOST_TEST(PositiveFinite(row.at("seconds_per_sample_evaluation")));
}

// Checks a JSON file written with --patterns `samples` --repeat `repeat`;
// returns the set of "problem/precision/solver" rows.
std::set<std::string> CheckJson(const Json& j, double samples, double repeat) {
  // The machine and the build flags the program saw.
  BOOST_TEST(j.at("machine").at("cores").get<double>() >= 1.0);
  BOOST_TEST(j.at("machine").at("usable_cores").get<double>() >= 1.0);
  for (const char* flag : {"__AVX2__", "_OPENMP", "NDEBUG", "__OPTIMIZE__"})
    BOOST_TEST(j.at("build").at(flag).is_boolean(), "build flag " << flag);
  BOOST_TEST(j.at("build").at("eigen_threads").get<double>() >= 1.0);
  BOOST_TEST(!j.at("build").at("compiler").get<std::string>().empty());

  std::set<std::string> floors;
  for (const Json& f : j.at("floors")) {
    const std::string key = f.at("problem").get<std::string>() + "/" + f.at("precision").get<std::string>();
    BOOST_TEST_CONTEXT("floor " << key) {
      BOOST_TEST(floors.insert(key).second);  // each once
      CheckFloor(f, samples, repeat);
    }
  }
  std::set<std::string> rows;
  for (const Json& row : j.at("results")) {
    const std::string key = row.at("problem").get<std::string>() + "/" + row.at("precision").get<std::string>() + "/" + row.at("solver").get<std::string>();
    BOOST_TEST_CONTEXT(key << ": " << row.at("status").get<std::string>()) {
      BOOST_TEST(rows.insert(key).second);  // each once
      BOOST_TEST(floors.count(row.at("problem").get<std::string>() + "/" + row.at("precision").get<std::string>()) == 1u);
      CheckRow(row, samples);
    }
  }
  return rows;
}

}  // namespace

BOOST_AUTO_TEST_CASE(tiny_hopfield_run_writes_sane_json) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --quiet --patterns 50 --problem hopfield-digits --repeat 3 --max-iter 200"
                                   " --json " + dir.File("b.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  BOOST_TEST(r.err.empty());  // --quiet
  for (const char* column : {"problem", "solver", "status", "converged", "iterations", "f evals", "sample evals",
                             "seconds", "x floor", "floor ms", "machine:", "build:"})
    BOOST_TEST(r.out.find(column) != std::string::npos, "missing " << column);
  const Json j = implicit::testing::ReadJson(dir.File("b.json"));
  BOOST_TEST(j.at("settings").at("patterns").get<double>() == 50.0);
  const std::set<std::string> rows = CheckJson(j, 50, 3);
  BOOST_TEST(rows.count("hopfield-digits/double/picard") == 1u);
  BOOST_TEST(rows.count("hopfield-digits/double/newton") == 0u);  // not in the default list
  // Picard (the CCCP step) retrieves every query at this size.
  for (const Json& row : j.at("results"))
    if (row.at("solver").get<std::string>() == "picard") BOOST_TEST(row.at("status").get<std::string>() == "converged");
}

// --solves K: each solver object solves K times and the last solve is
// reported; its counts are those of a single solve (a solver's result does
// not depend on its earlier solves), and the first solve's time is kept.
BOOST_AUTO_TEST_CASE(solves_reports_the_last_of_several_solves_by_one_solver) {
  ScratchDir dir;
  const std::string common = kApp + " --quiet --patterns 40 --problem hopfield-digits,deq-tanh --repeat 2"
                                    " --max-iter 200 --solvers picard,anderson,broyden,lbfgs";
  const auto once = RunCommand(common + " --json " + dir.File("once.json"));
  const auto thrice = RunCommand(common + " --solves 3 --json " + dir.File("thrice.json"));
  BOOST_TEST_INFO("stdout:\n" << thrice.out << "\nstderr:\n" << thrice.err);
  BOOST_REQUIRE(once.exit_code == 0);
  BOOST_REQUIRE(thrice.exit_code == 0);
  BOOST_TEST(thrice.out.find("the last of 3 by one solver object") != std::string::npos);
  const Json a = implicit::testing::ReadJson(dir.File("once.json"));
  const Json b = implicit::testing::ReadJson(dir.File("thrice.json"));
  BOOST_TEST(b.at("settings").at("solves").get<double>() == 3.0);
  CheckJson(b, 40, 2);
  BOOST_REQUIRE(a.at("results").size() == b.at("results").size());
  for (std::size_t i = 0; i < a.at("results").size(); ++i) {
    const Json &x = a.at("results")[i], &y = b.at("results")[i];
    BOOST_TEST_CONTEXT(y.at("problem").get<std::string>() << " / " << y.at("solver").get<std::string>()) {
      BOOST_TEST(x.at("status") == y.at("status"));
      if (y.at("status").get<std::string>() == "skipped") continue;
      BOOST_TEST(x.at("sample_evaluations") == y.at("sample_evaluations"));
      BOOST_TEST(x.at("iterations") == y.at("iterations"));
      BOOST_TEST(PositiveFinite(y.at("first_solve_seconds")));
    }
  }
  ExpectUsageError("--solves 0", "--solves");
}

// Every row and its fields, not convergence (--max-iter 20 keeps the -O0
// sanitizer run of all problems x all solvers x two precisions to ~20 s).
BOOST_AUTO_TEST_CASE(every_problem_every_solver_in_float_too) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --quiet --patterns 12 --solvers all --float --repeat 2 --max-iter 20"
                                   " --threads 1 --json " + dir.File("b.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json j = implicit::testing::ReadJson(dir.File("b.json"));
  BOOST_TEST(j.at("build").at("eigen_threads").get<double>() == 1.0);
  const std::set<std::string> rows = CheckJson(j, 12, 2);
  const std::vector<std::string> problems = implicit::testing::RegisteredProblems(kApp);
  BOOST_TEST(problems.size() >= 5u);
  BOOST_TEST(j.at("floors").size() == 2 * problems.size());  // double and float each
  for (const std::string& p : problems)
    for (const char* precision : {"double", "float"})
      for (const char* solver : {"picard", "newton", "lbfgs"})
        BOOST_TEST(rows.count(p + "/" + precision + "/" + solver) == 1u, p << "/" << precision << "/" << solver);
  for (const Json& row : j.at("results")) {
    if (row.at("precision").get<std::string>() == "float") BOOST_TEST(row.at("tolerance").get<double>() == 1e-5);
    if (row.at("precision").get<std::string>() == "double") BOOST_TEST(row.at("tolerance").get<double>() == 1e-8);
  }
}

BOOST_AUTO_TEST_CASE(bad_flags_are_a_one_line_error_with_status_2) {
  ExpectUsageError("--patterns 0", "--patterns");
  ExpectUsageError("--patterns 5000", "--patterns: 5000 exceeds");
  ExpectUsageError("--patterns x", "--patterns");
  ExpectUsageError("--repeat 0", "--repeat");
  ExpectUsageError("--repeat 2.5", "--repeat");
  ExpectUsageError("--tol -1", "--tol");
  ExpectUsageError("--tol nan", "--tol");
  ExpectUsageError("--max-iter 0", "--max-iter");
  ExpectUsageError("--beta -1", "--beta");
  ExpectUsageError("--beta abc", "--beta");
  ExpectUsageError("--time-limit -1", "--time-limit");
  ExpectUsageError("--threads -1", "--threads");
  ExpectUsageError("--float-tol 0", "--float-tol");
  ExpectUsageError("--float=1", "--float");
  ExpectUsageError("--problem nope", "unknown problem 'nope'");
  ExpectUsageError("--problem hopfield-digits,,rbm", "--problem");
  ExpectUsageError("--solvers picard,nope", "unknown solver 'nope'");
  ExpectUsageError("--frobnicate 3", "unknown option --frobnicate");
  ExpectUsageError("--json", "--json");
  // An unwritable output is not a usage error (status 1), found before the run.
  ExpectUsageError("--json /nonexistent/dir/b.json", "/nonexistent/dir/b.json", 1);
}

// --autodiff: every ratio present and positive; the closed form only for the
// retrieval energy; reverse mode's ratios exactly when the build has it.
BOOST_AUTO_TEST_CASE(autodiff_run_reports_every_ratio) {
  ScratchDir dir;
  // One small dimension: forward mode's products take seconds under the
  // sanitizers already at n = 48.
  const auto r = RunCommand(kApp + " --quiet --autodiff --autodiff-dims 16 --autodiff-energies "
                            "retrieval,attention --repeat 1 --json " + dir.File("a.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  BOOST_TEST(r.err.empty());  // --quiet
  const Json j = implicit::testing::ReadJson(dir.File("a.json"));
  const bool reverse = j.at("settings").at("reverse_mode").get<bool>();
  BOOST_TEST(reverse == implicit::kHaveReverseMode);
  // retrieval in 3 styles, attention in 2 (no scalar-loop attention), 1 dimension
  BOOST_REQUIRE(j.at("results").size() == 5u);
  for (const Json& row : j.at("results")) {
    const std::string energy = row.at("energy").get<std::string>();
    const std::string style = row.at("style").get<std::string>();
    BOOST_TEST((style == "blocks" || style == "eigen" || (style == "loop" && energy == "retrieval")));
    BOOST_TEST_CONTEXT(energy << " (" << style << ") n " << row.at("n")) {
      BOOST_TEST(row.at("value_seconds").get<double>() > 0);
      BOOST_TEST(row.at("gradient_forward").get<double>() > 0);
      BOOST_TEST(row.at("hvp_forward").get<double>() > 0);
      BOOST_TEST(row.at("gradient_reverse").is_null() == !reverse);
      BOOST_TEST(row.at("hvp_reverse").is_null() == !reverse);
      BOOST_TEST(row.at("gradient_closed_form").is_null() == (energy != "retrieval"));
      BOOST_TEST(row.at("parameter_vjp_reverse").is_null());  // no parameters
    }
  }
  const auto bad = RunCommand(kApp + " --autodiff --autodiff-energies retrieval,nope");
  BOOST_TEST(bad.exit_code == 2);
  BOOST_TEST(bad.err.find("unknown energy 'nope'") != std::string::npos, bad.err);
  const auto bad_style = RunCommand(kApp + " --autodiff --autodiff-styles eigen,fast");
  BOOST_TEST(bad_style.exit_code == 2);
  BOOST_TEST(bad_style.err.find("unknown style 'fast'") != std::string::npos, bad_style.err);
}

// --autodiff-energies et: the user-written Energy Transformer equals the
// closed form in value (the bench checks it and fails otherwise) and has
// every product timed, the parameter VJP included, and a training step of
// each timed. Its forward mode costs
// thousands of evaluations at n = 544, minutes at -O0: run where optimised.
BOOST_AUTO_TEST_CASE(autodiff_energy_transformer_row_matches_its_closed_form) {
#ifndef NDEBUG
  BOOST_TEST_MESSAGE("skipped in this unoptimised (assertions on) build: forward mode at n = 544 "
                     "takes minutes here; the Release pass runs it");
#else
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --quiet --autodiff --autodiff-energies et --repeat 1 --json " +
                            dir.File("e.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json j = implicit::testing::ReadJson(dir.File("e.json"));
  BOOST_REQUIRE(j.at("results").size() == 2u);  // written with the blocks and in Eigen
  for (const Json& row : j.at("results")) {
    BOOST_TEST(row.at("energy").get<std::string>() == "et");
    BOOST_TEST(row.at("n").get<int>() == 544);
    for (const char* field : {"value_seconds", "gradient_forward", "gradient_reverse",
                              "gradient_closed_form", "hvp_reverse", "hvp_closed_form",
                              "parameter_vjp_reverse", "parameter_vjp_closed_form"}) {
      BOOST_TEST(PositiveFinite(row.at(field)), field << " (" << row.at("style") << ")");
    }
  }
  // The training step of fixed work: every energy does the same iterations.
  const Json& step = j.at("et_training_step");
  for (const char* energy : {"user_energy", "eigen_energy", "closed_form"}) {
    BOOST_TEST(PositiveFinite(step.at(energy).at("seconds")), energy);
    BOOST_TEST(step.at(energy).at("forward_iterations").get<int>() == 30, energy);
    BOOST_TEST(step.at(energy).at("backward_iterations").get<int>() == 100, energy);
  }
  BOOST_TEST(PositiveFinite(step.at("ratio")));
  BOOST_TEST(PositiveFinite(step.at("eigen_ratio")));
#endif
}

// --graph-et: one row per graph asked for, its size as loaded, every time
// positive.
BOOST_AUTO_TEST_CASE(graph_et_run_times_every_product) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --quiet --graph-et --graph-et-graphs gen_1000 --repeat 1 --json " +
                            dir.File("g.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  BOOST_TEST(r.err.empty());  // --quiet
  const Json j = implicit::testing::ReadJson(dir.File("g.json"));
  BOOST_REQUIRE(j.at("graph_et").size() == 1u);
  const Json& row = j.at("graph_et")[0];
  BOOST_TEST(row.at("graph").get<std::string>() == "gen_1000");
  BOOST_TEST(row.at("nodes").get<int>() == 1000);
  BOOST_TEST(row.at("directed_edges").get<int>() == 4936);
  for (const char* t : {"map_seconds", "vjp_seconds", "parameter_vjp_seconds"}) BOOST_TEST(PositiveFinite(row.at(t)), t);
}

BOOST_AUTO_TEST_CASE(help_succeeds) {
  const auto r = RunCommand(kApp + " --help");
  BOOST_TEST(r.exit_code == 0);
  for (const char* flag : {"--problem", "--solvers", "--patterns", "--beta", "--tol", "--max-iter", "--repeat",
                           "--float", "--json", "--quiet", "--autodiff", "--autodiff-dims", "--graph-et",
                           "--graph-et-graphs"})
    BOOST_TEST(r.out.find(flag) != std::string::npos, "missing " << flag);
}
#else
BOOST_AUTO_TEST_CASE(skipped_without_apps) {
  BOOST_TEST_MESSAGE("implicit-bench was not built (IMPLICIT_BUILD_APPS=OFF): skipping");
}
#endif
