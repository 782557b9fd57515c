// End-to-end runs of implicit-compare at small sizes: the JSON and CSV it
// writes hold one sane row per (problem, solver), and bad input ends with a
// one-line error and a non-zero exit, never a crash.
#define BOOST_TEST_MODULE compare
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include <implicit/solvers/kinsol.h>
#include <implicit/solvers/petsc.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

using implicit::testing::CountLines;
using implicit::testing::Json;
using implicit::testing::RunCommand;
using implicit::testing::ScratchDir;

#ifdef IMPLICIT_APP_COMPARE
namespace {

const std::string kApp = IMPLICIT_APP_COMPARE;

// Runs the program expecting failure: non-zero exit (not a signal), one line on
// stderr containing `expect`.
void ExpectOneLineError(const std::string& args, const std::string& expect) {
  implicit::testing::ExpectOneLineError(kApp + " --quiet " + args, expect);
}

}  // namespace

BOOST_AUTO_TEST_CASE(small_comparison_writes_sane_json_and_csv) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --quiet --patterns 12 --max-iter 60 --json " + dir.File("r.json") +
                            " --csv " + dir.File("r.csv"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  BOOST_TEST(r.err.empty());  // --quiet: no progress line
  BOOST_TEST(r.out.find("problem") != std::string::npos);

  const Json j = implicit::testing::ReadJson(dir.File("r.json"));
  const auto& rows = j.at("results");
  BOOST_REQUIRE(!rows.empty());
  std::set<std::string> problems, solvers, pairs;
  for (const Json& row : rows) {
    for (const char* field : {"problem", "solver", "status", "samples", "converged_samples"})
      BOOST_TEST(row.contains(field), "missing field " << field);
    const std::string status = row.at("status").get<std::string>();
    const std::string pair = row.at("problem").get<std::string>() + "/" + row.at("solver").get<std::string>();
    BOOST_TEST_INFO(pair << ": " << status);
    BOOST_TEST(implicit::testing::RunStatuses().count(status) == 1u);
    BOOST_TEST(pairs.insert(pair).second);  // each pair once
    problems.insert(row.at("problem").get<std::string>());
    solvers.insert(row.at("solver").get<std::string>());
    const double samples = row.at("samples").get<double>(), converged = row.at("converged_samples").get<double>();
    BOOST_TEST(samples == 12.0);
    BOOST_TEST(converged >= 0.0);
    BOOST_TEST(converged <= samples);
    if (status == "skipped") {
      BOOST_TEST(!row.at("message").get<std::string>().empty());
      continue;
    }
    if (status == "invalid_input") continue;
    for (const char* field : {"iterations", "function_evaluations", "residual", "seconds"})
      BOOST_TEST(row.contains(field), "missing field " << field);
    BOOST_TEST(row.at("iterations").get<double>() >= 0.0);
    BOOST_TEST(row.at("iterations").get<double>() <= 60.0 + 1e-9);
    BOOST_TEST(row.at("function_evaluations").get<double>() >= 1.0);
    BOOST_TEST(row.at("seconds").get<double>() >= 0.0);
    // "converged" exactly when every sample converged, and then within --tol.
    BOOST_TEST((status == "converged") == (converged == samples));
    if (status == "converged") {
      BOOST_TEST(row.at("residual").is_number());
      BOOST_TEST(row.at("residual").get<double>() <= 1e-8);
    }
  }
  BOOST_TEST(pairs.size() == problems.size() * solvers.size());
  // Every registered problem runs by default.
  const std::vector<std::string> registered = implicit::testing::RegisteredProblems(kApp);
  BOOST_TEST(registered.size() >= 5u);
  BOOST_TEST(problems == std::set<std::string>(registered.begin(), registered.end()));
  BOOST_TEST(solvers.count("picard") == 1u);
  // Picard on a contraction (|W|_2 = 0.9, |tanh'| <= 1) always converges.
  for (const Json& row : rows) {
    if (row.at("problem").get<std::string>() == "deq-tanh" && row.at("solver").get<std::string>() == "picard") {
      BOOST_TEST(row.at("status").get<std::string>() == "converged");
    }
  }
  const std::string csv = implicit::testing::ReadFile(dir.File("r.csv"));
  BOOST_TEST(CountLines(csv) == static_cast<int>(rows.size()) + 1);
  BOOST_TEST(csv.find("problem,solver,library,status") == 0u);
  // The default list is libimplicit's own solvers.
  for (const Json& row : rows) BOOST_TEST(row.at("library").get<std::string>() == "libimplicit");
}

// --solvers all adds the KINSOL and PETSc backends this build has, each row
// naming its library; on the contractive deq-tanh their fixed-point methods
// converge like Picard, and the plot is drawn without their (absent) traces.
BOOST_AUTO_TEST_CASE(all_solvers_include_the_backends) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --quiet --problem deq-tanh --solvers all --patterns 6 --json " +
                            dir.File("r.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  std::map<std::string, std::pair<std::string, std::string>> rows;  // solver -> (library, status)
  const Json j = implicit::testing::ReadJson(dir.File("r.json"));
  for (const Json& row : j.at("results"))
    rows[row.at("solver").get<std::string>()] = {row.at("library").get<std::string>(),
                                                 row.at("status").get<std::string>()};
  BOOST_TEST(rows.at("picard").first == "libimplicit");
  const bool kinsol = implicit::kinsol::Available(), petsc = implicit::petsc::Available();
  BOOST_TEST(rows.count("kinsol-anderson") == (kinsol ? 1u : 0u));
  BOOST_TEST(rows.count("petsc-anderson") == (petsc ? 1u : 0u));
  if (kinsol) {
    BOOST_TEST(rows.at("kinsol-picard").first.rfind("SUNDIALS KINSOL", 0) == 0u);
    for (const char* name : {"kinsol-picard", "kinsol-anderson", "kinsol-newton-gmres"})
      BOOST_TEST(rows.at(name).second == "converged", name);
  }
  if (petsc) BOOST_TEST(rows.at("petsc-anderson").first.rfind("PETSc", 0) == 0u);
  if (!kinsol && !petsc) BOOST_TEST_MESSAGE("no solver backend in this build: only libimplicit's rows checked");
}

BOOST_AUTO_TEST_CASE(selection_and_plot) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --problem deq-tanh --solvers picard,anderson --patterns 5 --json " +
                            dir.File("r.json") + " --plot " + dir.File("p.svg"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_TEST(!r.err.empty());  // progress on stderr without --quiet
  // The JSON is written either way.
  const Json j = implicit::testing::ReadJson(dir.File("r.json"));
  BOOST_TEST(j.at("results").size() == 2u);
  // The plot is drawn when gnuplot exists; otherwise the run fails (exit 1)
  // naming the plot that was not written.
  if (RunCommand("command -v gnuplot").exit_code == 0) {
    BOOST_REQUIRE(r.exit_code == 0);
    BOOST_TEST(r.out.find("plot: " + dir.File("p.svg")) != std::string::npos);
    BOOST_TEST(implicit::testing::ReadFile(dir.File("p.svg")).find("<svg") != std::string::npos);
  } else {
    BOOST_TEST(r.exit_code == 1);
    BOOST_TEST(r.err.find("--plot: cannot draw '" + dir.File("p.svg")) != std::string::npos);
  }
}

// Each registered problem on its own, by the name --list-problems gives: one
// row per solver, and its settings in the JSON.
BOOST_AUTO_TEST_CASE(every_registered_problem_runs_alone) {
  ScratchDir dir;
  for (const std::string& problem : implicit::testing::RegisteredProblems(kApp)) {
    BOOST_TEST_CONTEXT(problem) {
      const auto r = RunCommand(kApp + " --quiet --problem " + problem + " --solvers picard,anderson --patterns 4" +
                                " --max-iter 20 --json " + dir.File("p.json"));
      BOOST_REQUIRE(r.exit_code == 0);
      const Json j = implicit::testing::ReadJson(dir.File("p.json"));
      BOOST_TEST(j.at("results").size() == 2u);
      for (const Json& row : j.at("results")) BOOST_TEST(row.at("problem").get<std::string>() == problem);
      BOOST_TEST(r.out.find(problem) != std::string::npos);
    }
  }
  const auto help = RunCommand(kApp + " --help");
  for (const std::string& problem : implicit::testing::RegisteredProblems(kApp))
    BOOST_TEST(help.out.find(problem) != std::string::npos, problem << " missing in --help");
  // "all", the default --help shows, names every problem when given.
  const auto all = RunCommand(kApp + " --quiet --problem all --solvers picard --patterns 2 --max-iter 2 --json " +
                              dir.File("all.json"));
  BOOST_REQUIRE(all.exit_code == 0);
  BOOST_TEST(implicit::testing::ReadJson(dir.File("all.json")).at("results").size() ==
             implicit::testing::RegisteredProblems(kApp).size());
}

// --solver-options reaches the solver through the registry: one iteration is
// not enough for anderson, while picard with its own options still converges;
// unknown solvers, keys and values are one-line errors with status 2.
BOOST_AUTO_TEST_CASE(per_solver_options) {
  ScratchDir dir;
  const std::string base = kApp + " --quiet --problem deq-tanh --solvers picard,anderson --patterns 5 --json " +
                           dir.File("o.json");
  auto statuses = [&](const std::string& options) {
    const auto r = RunCommand(base + " " + options);
    BOOST_TEST_INFO("options: " << options << "\nstderr: " << r.err);
    BOOST_REQUIRE(r.exit_code == 0);
    const Json j = implicit::testing::ReadJson(dir.File("o.json"));
    std::map<std::string, Json> rows;
    for (const Json& row : j.at("results")) rows[row.at("solver").get<std::string>()] = row;
    BOOST_REQUIRE(rows.size() == 2u);
    return std::make_pair(j.at("settings").at("solver_options"), rows);
  };
  const auto plain = statuses("");
  BOOST_TEST(plain.second.at("anderson").at("status").get<std::string>() == "converged");
  BOOST_TEST(plain.first.empty());
  const auto capped = statuses("--solver-options 'anderson:max_iterations=1,memory=3;picard:max_stall_iterations=50'");
  BOOST_TEST(capped.second.at("anderson").at("status").get<std::string>() == "max_iterations");
  BOOST_TEST(capped.second.at("anderson").at("iterations").get<double>() == 1.0);
  BOOST_TEST(capped.second.at("picard").at("status").get<std::string>() == "converged");
  BOOST_TEST(capped.first.at("anderson").at("memory").get<std::string>() == "3");
  // Repeating the option is the same as ';'.
  const auto repeated = statuses("--solver-options anderson:max_iterations=1 --solver-options picard:max_iterations=2");
  BOOST_TEST(repeated.second.at("anderson").at("status").get<std::string>() == "max_iterations");
  BOOST_TEST(repeated.second.at("picard").at("iterations").get<double>() <= 2.0);

  for (const auto& [options, expect] : std::vector<std::pair<std::string, std::string>>{
           {"anderson:memroy=3", "memroy"},
           {"anderson:memory=x", "memory"},
           {"anderson:memory", "--solver-options"},
           {"nope:memory=3", "unknown solver 'nope'"},
           {"anderson", "--solver-options"},
           {"broyden:memory=3", "broyden"}}) {
    implicit::testing::ExpectOneLineError(base + " --solver-options '" + options + "'", expect, 2,
                                          "implicit-compare");
  }
}

BOOST_AUTO_TEST_CASE(bad_input_is_a_one_line_error) {
  ScratchDir dir;
  ExpectOneLineError("--problem nope", "unknown problem 'nope'");
  ExpectOneLineError("--solvers picard,nope", "unknown solver 'nope'");
  ExpectOneLineError("--beta -1", "--beta");
  ExpectOneLineError("--beta abc", "--beta");
  ExpectOneLineError("--beta inf", "--beta");
  ExpectOneLineError("--problem deq-tanh,,rbm", "--problem");
  ExpectOneLineError("--spectral-norm 0", "--spectral-norm");
  ExpectOneLineError("--rbm-p 1", "--rbm-p");
  ExpectOneLineError("--quiet extra", "unexpected argument 'extra'");
  ExpectOneLineError("--patterns 0", "--patterns");
  ExpectOneLineError("--patterns 5000", "--patterns: 5000 exceeds");
  ExpectOneLineError("--max-iter 0", "--max-iter");
  ExpectOneLineError("--tol -1", "--tol");
  ExpectOneLineError("--frobnicate 3", "unknown option --frobnicate");
  ExpectOneLineError("--plot " + dir.File("p.gif"), ".png or .svg");
  ExpectOneLineError("--data " + dir.File("missing.csv.gz"), "cannot open digits file");
  std::ofstream(dir.File("bad.csv")) << "1,2,3\n";
  ExpectOneLineError("--data " + dir.File("bad.csv"), "line 1");
  ExpectOneLineError("--json /nonexistent/dir/r.json --problem deq-tanh --solvers picard --patterns 2",
                     "/nonexistent/dir/r.json");
}

BOOST_AUTO_TEST_CASE(help_succeeds) {
  const auto r = RunCommand(kApp + " --help");
  BOOST_TEST(r.exit_code == 0);
  for (const char* flag : {"--problem", "--solvers", "--solver-options", "--tol", "--max-iter", "--beta",
                           "--patterns", "--alpha", "--spectral-norm", "--et-step", "--rbm-scale", "--rbm-p",
                           "--seed", "--data", "--json", "--csv", "--plot", "--quiet"})
    BOOST_TEST(r.out.find(flag) != std::string::npos, "missing " << flag);
}

// mpirun -np 2: the batch split over two ranks gives the one-process results
// per sample (converged samples, per-sample evaluations); one rank prints.
BOOST_AUTO_TEST_CASE(two_ranks_solve_like_one_process,
                     *boost::unit_test::precondition(implicit::testing::MpiPresent())) {
  ScratchDir dir;
  const std::string args = " --quiet --problem hopfield-digits,rbm --solvers picard,anderson --patterns 25 "
                           "--max-iter 300 --json ";
  const auto one = RunCommand(kApp + args + dir.File("one.json"));
  const auto two = RunCommand(implicit::testing::MpirunTwoRanks() + kApp + args + dir.File("two.json"));
  BOOST_TEST_INFO("one:\n" << one.out << one.err << "\ntwo:\n" << two.out << two.err);
  BOOST_REQUIRE(one.exit_code == 0);
  BOOST_REQUIRE(two.exit_code == 0);
  BOOST_TEST(CountLines(two.out) == CountLines(one.out));  // one table, not two
  const Json a = implicit::testing::ReadJson(dir.File("one.json")).at("results");
  const Json b = implicit::testing::ReadJson(dir.File("two.json")).at("results");
  BOOST_REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST_INFO(a[i].at("problem").get<std::string>() << "/" << a[i].at("solver").get<std::string>());
    BOOST_TEST(b[i].at("status").get<std::string>() == a[i].at("status").get<std::string>());
    BOOST_TEST(b[i].at("converged_samples").get<double>() == a[i].at("converged_samples").get<double>());
    BOOST_TEST(b[i].at("sample_evaluations").get<double>() == a[i].at("sample_evaluations").get<double>());
    BOOST_TEST(b[i].at("iterations").get<double>() <= a[i].at("iterations").get<double>());
    BOOST_TEST(b[i].at("message").get<std::string>() == "solved on 2 ranks");
  }
}
#else
BOOST_AUTO_TEST_CASE(skipped_without_apps) {
  BOOST_TEST_MESSAGE("implicit-compare was not built (IMPLICIT_BUILD_APPS=OFF): skipping");
}
#endif
