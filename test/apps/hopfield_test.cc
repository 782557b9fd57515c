// End-to-end runs of implicit-hopfield at small sizes: each subcommand writes
// JSON whose rates lie in [0, 1] and whose MSEs are >= 0, with the relations
// that hold by construction; bad input is a one-line error, never a crash.
#define BOOST_TEST_MODULE hopfield
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include <fstream>
#include <string>

using implicit::testing::CountLines;
using implicit::testing::Json;
using implicit::testing::RunCommand;
using implicit::testing::ScratchDir;

#ifdef IMPLICIT_APP_HOPFIELD
namespace {

const std::string kApp = IMPLICIT_APP_HOPFIELD;

Json RunJson(const std::string& args, const ScratchDir& dir) {
  const auto r = RunCommand(kApp + " " + args + " --quiet --json " + dir.File("r.json"));
  BOOST_TEST_INFO("args: " << args << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  return implicit::testing::ReadJson(dir.File("r.json"));
}

bool IsRate(const Json& v) { return v.is_number() && v.get<double>() >= 0.0 && v.get<double>() <= 1.0; }

void ExpectOneLineError(const std::string& args, const std::string& expect) {
  implicit::testing::ExpectOneLineError(kApp + " " + args, expect);
}

}  // namespace

BOOST_AUTO_TEST_CASE(retrieval_rates_are_rates) {
  ScratchDir dir;
  const Json j = RunJson("retrieval --patterns 30 --beta 4", dir);
  BOOST_TEST(IsRate(j.at("one_step_hit_rate")));
  BOOST_TEST(IsRate(j.at("converged_hit_rate")));
  BOOST_TEST(j.at("patterns").get<double>() == 30.0);
  BOOST_TEST(j.at("status").get<std::string>() == "converged");
  BOOST_TEST(j.at("converged_samples").get<double>() == 30.0);
  // Storing one pattern: softmax over one memory returns it exactly, a hit.
  const Json one = RunJson("retrieval --patterns 1 --beta 1 --solver anderson", dir);
  BOOST_TEST(one.at("one_step_hit_rate").get<double>() == 1.0);
  BOOST_TEST(one.at("converged_hit_rate").get<double>() == 1.0);
}

BOOST_AUTO_TEST_CASE(completion_mse_is_nonnegative_and_beats_mean_fill_at_high_beta) {
  ScratchDir dir;
  const Json j = RunJson("completion --beta 1", dir);
  BOOST_TEST(j.at("mse").get<double>() >= 0.0);
  BOOST_TEST(j.at("mean_fill_mse").get<double>() > 0.0);
  // As beta -> 0 the weights become uniform and the completion is the memories'
  // mean: exactly the mean-fill baseline.
  const Json flat = RunJson("completion --beta 1e-12", dir);
  BOOST_TEST(std::abs(flat.at("mse").get<double>() - flat.at("mean_fill_mse").get<double>()) < 1e-9);
  BOOST_TEST(j.at("mse").get<double>() < j.at("mean_fill_mse").get<double>());
}

BOOST_AUTO_TEST_CASE(capacity_rates_and_the_exponential_gap) {
  ScratchDir dir;
  const Json j = RunJson("capacity --dimension 32 --probes 10 --counts 2,16,64 --flip 0.05", dir);
  const auto& rows = j.at("results");
  BOOST_REQUIRE(rows.size() == 3u);
  for (const Json& r : rows)
    for (const char* k : {"quadratic_retrieval_rate", "polynomial_retrieval_rate", "exponential_retrieval_rate"})
      BOOST_TEST(IsRate(r.at(k)), k);
  // Two patterns far below the classical capacity (0.14 d) are all retrieved.
  BOOST_TEST(rows[0].at("quadratic_retrieval_rate").get<double>() == 1.0);
  // 64 patterns in dimension 32 (twice d) exceed the quadratic capacity...
  BOOST_TEST(rows[2].at("quadratic_retrieval_rate").get<double>() < 0.5);
  // ...but not the exponential one.
  BOOST_TEST(rows[2].at("exponential_retrieval_rate").get<double>() >= rows[2].at("quadratic_retrieval_rate").get<double>());
}

BOOST_AUTO_TEST_CASE(sparse_support_sizes) {
  ScratchDir dir;
  const Json j = RunJson("sparse --patterns 20 --betas 0.01,3", dir);
  const auto& rows = j.at("results");
  BOOST_REQUIRE(rows.size() == 6u);
  for (const Json& r : rows) {
    BOOST_TEST(r.at("mean_support").get<double>() >= 1.0);  // weights sum to one
    BOOST_TEST(r.at("mean_support").get<double>() <= 20.0);
    BOOST_TEST(r.at("min_support").get<double>() <= r.at("max_support").get<double>());
    BOOST_TEST(IsRate(r.at("converged_hit_rate")));
    // Softmax weights are all positive.
    if (r.at("attention").get<std::string>() == "softmax") BOOST_TEST(r.at("mean_support").get<double>() == 20.0);
  }
  // Sparsemax at high beta selects a single pattern.
  for (const Json& r : rows)
    if (r.at("attention").get<std::string>() == "sparsemax" && r.at("beta").get<double>() == 3.0) BOOST_TEST(r.at("max_support").get<double>() <= 2.0);
}

BOOST_AUTO_TEST_CASE(bad_input_is_a_one_line_error) {
  ScratchDir dir;
  ExpectOneLineError("", "missing subcommand");
  ExpectOneLineError("recall", "unknown subcommand 'recall'");
  ExpectOneLineError("retrieval --beta -1", "--beta");
  ExpectOneLineError("retrieval --patterns 0", "--patterns");
  ExpectOneLineError("retrieval --patterns 5000", "--patterns: 5000 exceeds");
  ExpectOneLineError("retrieval --solver nope", "unknown solver 'nope'");
  ExpectOneLineError("retrieval --solver newtonx", "unknown solver");
  ExpectOneLineError("completion --beta 0", "--beta");
  ExpectOneLineError("capacity --flip 0.7", "--flip");
  ExpectOneLineError("capacity --counts 4,x", "--counts");
  ExpectOneLineError("sparse --betas 1,-2", "--betas");
  ExpectOneLineError("retrieval --data " + dir.File("none.csv.gz"), "cannot open digits file");
  std::ofstream(dir.File("bad.csv")) << "0,1\n";
  ExpectOneLineError("completion --data " + dir.File("bad.csv"), "line 1");
  ExpectOneLineError("retrieval --whatever 1", "unknown option --whatever");
}
#else
BOOST_AUTO_TEST_CASE(skipped_without_apps) {
  BOOST_TEST_MESSAGE("implicit-hopfield was not built (IMPLICIT_BUILD_APPS=OFF): skipping");
}
#endif
