// End-to-end runs of implicit-et at a tiny size: the JSON holds the held-out
// masked MSE and its baselines (all >= 0, mean fill > 0), the PNG grid and the
// checkpoint are written, --resume continues from the checkpoint, and bad
// input (options, checkpoints of another model, corrupt or truncated
// checkpoints, malformed data) is a one-line error.
#define BOOST_TEST_MODULE et
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include <cmath>
#include <fstream>
#include <string>

using implicit::testing::CountLines;
using implicit::testing::Json;
using implicit::testing::ReadFile;
using implicit::testing::RunCommand;
using implicit::testing::ScratchDir;

#ifdef IMPLICIT_APP_ET
namespace {

const std::string kApp = IMPLICIT_APP_ET;

// A tiny model; `dim` and `holdout` can be varied.
std::string Small(const ScratchDir& dir, int dim = 8, int holdout = 40, const std::string& image = "et.png") {
  return kApp + " --quiet --batch 6 --holdout " + std::to_string(holdout) + " --dim " + std::to_string(dim) +
         " --heads 1 --memories 8 --max-iter 60 --tol 1e-5" +
         " --checkpoint " + dir.File("et.ckpt") + " --image " + dir.File(image);
}

void ExpectOneLineError(const std::string& command, const std::string& expect) {
  const auto r = RunCommand(command);
  BOOST_TEST_INFO("command: " << command << "\nstderr: " << r.err);
  BOOST_TEST(r.signal == 0);
  BOOST_TEST(r.exit_code > 0);
  BOOST_TEST(CountLines(r.err) == 1);
  BOOST_TEST(r.err.find("error") != std::string::npos);
  BOOST_TEST(r.err.find(expect) != std::string::npos);
}

}  // namespace

BOOST_AUTO_TEST_CASE(tiny_training_run_writes_results_and_resumes) {
  ScratchDir dir;
  const auto r = RunCommand(Small(dir) + " --steps 4 --checkpoint-every 2 --json " + dir.File("a.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json j = implicit::testing::ParseJson(ReadFile(dir.File("a.json")));
  for (const char* k : {"heldout_mse", "mean_fill_mse", "hopfield_mse", "first_train_loss", "last_train_loss"}) {
    BOOST_TEST_INFO(k);
    BOOST_TEST(j[k].type == Json::kNumber);
    BOOST_TEST(j[k].number >= 0.0);
  }
  BOOST_TEST(j["mean_fill_mse"].number > 0.0);
  BOOST_TEST(j["mode"].string == "implicit");
  BOOST_TEST(j["heldout_digits"].number == 40.0);
  // One-step Hopfield with many memories is at least as good as the mean.
  BOOST_TEST(j["hopfield_mse"].number <= j["mean_fill_mse"].number);
  BOOST_TEST(ReadFile(dir.File("et.png")).compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  BOOST_TEST(ReadFile(dir.File("et.ckpt")).compare(0, 8, "IMPLCKPT") == 0);

  // Resume from step 4 to step 6.
  const auto r2 = RunCommand(Small(dir) + " --steps 6 --resume " + dir.File("et.ckpt") + " --json " +
                             dir.File("b.json"));
  BOOST_TEST_INFO("stdout:\n" << r2.out << "\nstderr:\n" << r2.err);
  BOOST_REQUIRE(r2.exit_code == 0);
  BOOST_TEST(r2.out.find("trained 2 steps") != std::string::npos);
  // The resumed run's evaluation uses the same masks, so its baselines match.
  const Json k = implicit::testing::ParseJson(ReadFile(dir.File("b.json")));
  BOOST_TEST(k["mean_fill_mse"].number == j["mean_fill_mse"].number);
  BOOST_TEST(k["hopfield_mse"].number == j["hopfield_mse"].number);
}

BOOST_AUTO_TEST_CASE(unrolled_training_runs) {
  ScratchDir dir;
  const auto r = RunCommand(Small(dir) + " --steps 2 --unroll --unroll-steps 5 --json " + dir.File("u.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json j = implicit::testing::ParseJson(ReadFile(dir.File("u.json")));
  BOOST_TEST(j["mode"].string == "unroll");
  BOOST_TEST(j["heldout_mse"].number >= 0.0);
}

BOOST_AUTO_TEST_CASE(gradients_agree_with_finite_differences) {
  ScratchDir dir;
  const auto r = RunCommand(Small(dir) + " --unroll --check-gradients 6");
  BOOST_REQUIRE(r.exit_code == 0);
  const std::size_t at = r.out.find("largest abs error ");
  BOOST_REQUIRE(at != std::string::npos);
  BOOST_TEST(std::stod(r.out.substr(at + 18)) < 1e-7);
}

BOOST_AUTO_TEST_CASE(bad_input_and_bad_checkpoints) {
  ScratchDir dir;
  ExpectOneLineError(Small(dir) + " --masked 0", "--masked");
  ExpectOneLineError(Small(dir) + " --masked 16", "--masked");
  ExpectOneLineError(Small(dir) + " --lr -1", "--lr");
  ExpectOneLineError(Small(dir) + " --mode sideways", "--mode");
  ExpectOneLineError(Small(dir) + " --solver nope", "unknown solver 'nope'");
  ExpectOneLineError(Small(dir, 8, 5000), "--holdout");
  ExpectOneLineError(Small(dir, 8, 40, "x.jpg"), ".png");
  ExpectOneLineError(Small(dir) + " --resume " + dir.File("missing.ckpt"), "cannot open checkpoint");
  std::ofstream(dir.File("bad.csv")) << "1,2\n";
  ExpectOneLineError(Small(dir) + " --data " + dir.File("bad.csv"), "line 1");

  // A checkpoint of this model, then variations of it.
  BOOST_REQUIRE(RunCommand(Small(dir) + " --steps 1").exit_code == 0);
  const std::string good = ReadFile(dir.File("et.ckpt"));
  ExpectOneLineError(Small(dir, 10) + " --resume " + dir.File("et.ckpt"), "dim=8");
  std::ofstream(dir.File("cut.ckpt"), std::ios::binary) << good.substr(0, good.size() / 2);
  ExpectOneLineError(Small(dir) + " --resume " + dir.File("cut.ckpt"), "truncated");
  std::string flipped = good;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x40);
  std::ofstream(dir.File("flip.ckpt"), std::ios::binary) << flipped;
  ExpectOneLineError(Small(dir) + " --resume " + dir.File("flip.ckpt"), "checksum mismatch");
  ExpectOneLineError(Small(dir) + " --resume " + dir.File("bad.csv"), "not a libimplicit checkpoint");
}
#else
BOOST_AUTO_TEST_CASE(skipped_without_apps) {
  BOOST_TEST_MESSAGE("implicit-et was not built (IMPLICIT_BUILD_APPS=OFF): skipping");
}
#endif
