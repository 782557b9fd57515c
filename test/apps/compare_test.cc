// End-to-end runs of implicit-compare at small sizes: the JSON and CSV it
// writes hold one sane row per (problem, solver), and bad input ends with a
// one-line error and a non-zero exit, never a crash.
#define BOOST_TEST_MODULE compare
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include <fstream>
#include <set>
#include <string>

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
  const auto r = RunCommand(kApp + " --quiet " + args);
  BOOST_TEST_INFO("args: " << args << "\nstderr: " << r.err);
  BOOST_TEST(r.signal == 0);
  BOOST_TEST(r.exit_code > 0);
  BOOST_TEST(CountLines(r.err) == 1);
  BOOST_TEST(r.err.find("error") != std::string::npos);
  BOOST_TEST(r.err.find(expect) != std::string::npos);
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

  const Json j = implicit::testing::ParseJson(implicit::testing::ReadFile(dir.File("r.json")));
  const auto& rows = j["results"].array;
  BOOST_REQUIRE(!rows.empty());
  std::set<std::string> problems, solvers, pairs;
  for (const Json& row : rows) {
    for (const char* field : {"problem", "solver", "status", "samples", "converged_samples"})
      BOOST_TEST(row.Has(field), "missing field " << field);
    const std::string status = row["status"].string;
    const std::string pair = row["problem"].string + "/" + row["solver"].string;
    BOOST_TEST_INFO(pair << ": " << status);
    BOOST_TEST(implicit::testing::RunStatuses().count(status) == 1u);
    BOOST_TEST(pairs.insert(pair).second);  // each pair once
    problems.insert(row["problem"].string);
    solvers.insert(row["solver"].string);
    const double samples = row["samples"].number, converged = row["converged_samples"].number;
    BOOST_TEST(samples == 12.0);
    BOOST_TEST(converged >= 0.0);
    BOOST_TEST(converged <= samples);
    if (status == "skipped") {
      BOOST_TEST(!row["message"].string.empty());
      continue;
    }
    if (status == "invalid_input") continue;
    for (const char* field : {"iterations", "function_evaluations", "residual", "seconds"})
      BOOST_TEST(row.Has(field), "missing field " << field);
    BOOST_TEST(row["iterations"].number >= 0.0);
    BOOST_TEST(row["iterations"].number <= 60.0 + 1e-9);
    BOOST_TEST(row["function_evaluations"].number >= 1.0);
    BOOST_TEST(row["seconds"].number >= 0.0);
    // "converged" exactly when every sample converged, and then within --tol.
    BOOST_TEST((status == "converged") == (converged == samples));
    if (status == "converged") {
      BOOST_TEST(row["residual"].type == Json::kNumber);
      BOOST_TEST(row["residual"].number <= 1e-8);
    }
  }
  BOOST_TEST(pairs.size() == problems.size() * solvers.size());
  BOOST_TEST(problems.count("hopfield-digits") == 1u);
  BOOST_TEST(problems.count("deq-tanh") == 1u);
  BOOST_TEST(solvers.count("picard") == 1u);
  // Picard on a contraction (|W|_2 = 0.9, |tanh'| <= 1) always converges.
  for (const Json& row : rows) {
    if (row["problem"].string == "deq-tanh" && row["solver"].string == "picard") {
      BOOST_TEST(row["status"].string == "converged");
    }
  }
  const std::string csv = implicit::testing::ReadFile(dir.File("r.csv"));
  BOOST_TEST(CountLines(csv) == static_cast<int>(rows.size()) + 1);
  BOOST_TEST(csv.find("problem,solver,status") == 0u);
}

BOOST_AUTO_TEST_CASE(selection_and_plot) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --problem deq-tanh --solvers picard,anderson --patterns 5 --json " +
                            dir.File("r.json") + " --plot " + dir.File("p.svg"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  BOOST_TEST(!r.err.empty());  // progress on stderr without --quiet
  const Json j = implicit::testing::ParseJson(implicit::testing::ReadFile(dir.File("r.json")));
  BOOST_TEST(j["results"].array.size() == 2u);
  // The plot is drawn when gnuplot exists; otherwise the output says why not.
  if (r.out.find("plot: " + dir.File("p.svg")) != std::string::npos) {
    BOOST_TEST(implicit::testing::ReadFile(dir.File("p.svg")).find("<svg") != std::string::npos);
  } else {
    BOOST_TEST(r.out.find("plot: not written") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(bad_input_is_a_one_line_error) {
  ScratchDir dir;
  ExpectOneLineError("--problem nope", "unknown problem 'nope'");
  ExpectOneLineError("--solvers picard,nope", "unknown solver 'nope'");
  ExpectOneLineError("--beta -1", "--beta");
  ExpectOneLineError("--beta abc", "--beta");
  ExpectOneLineError("--patterns 0", "--patterns");
  ExpectOneLineError("--patterns 5000", "--patterns 5000 exceeds");
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
  BOOST_TEST(r.out.find("--problem") != std::string::npos);
}
#else
BOOST_AUTO_TEST_CASE(skipped_without_apps) {
  BOOST_TEST_MESSAGE("implicit-compare was not built (IMPLICIT_BUILD_APPS=OFF): skipping");
}
#endif
