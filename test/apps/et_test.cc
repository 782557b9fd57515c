// End-to-end runs of implicit-et at a tiny size: the JSON holds the held-out
// masked MSE and its baselines (all >= 0, mean fill > 0), the PNG grid and the
// checkpoint are written, --resume continues from the checkpoint, a few
// hundred steps beat mean fill, the gradients of both training modes match
// finite differences, and bad
// input (options, checkpoints of another model, corrupt or truncated
// checkpoints, malformed data) is a one-line error; --device cuda refuses
// what the device cannot do and, on a GPU, trains like the CPU.
#define BOOST_TEST_MODULE et
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include "support/gpu.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using implicit::testing::CountLines;
using implicit::testing::ExpectOneLineError;
using implicit::testing::Json;
using implicit::testing::ReadFile;
using implicit::testing::ShellQuote;
using implicit::testing::RunCommand;
using implicit::testing::ScratchDir;

#ifdef IMPLICIT_APP_ET
namespace {

const std::string kApp = IMPLICIT_APP_ET;

// A tiny model; `dim`, `holdout`, the image name and `batch` can be varied.
std::string Small(const ScratchDir& dir, int dim = 8, int holdout = 40, const std::string& image = "et.png",
                  int batch = 6) {
  return kApp + " --quiet --batch " + std::to_string(batch) + " --holdout " + std::to_string(holdout) +
         " --dim " + std::to_string(dim) +
         " --pos-dim 4 --heads 1 --memories 8 --max-iter 60 --tol 1e-5" +
         " --checkpoint " + dir.File("et.ckpt") + " --image " + dir.File(image);
}

}  // namespace

BOOST_AUTO_TEST_CASE(tiny_training_run_writes_results_and_resumes) {
  ScratchDir dir;
  const auto r = RunCommand(Small(dir) + " --steps 4 --checkpoint-every 2 --json " + dir.File("a.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json j = implicit::testing::ReadJson(dir.File("a.json"));
  for (const char* k : {"heldout_mse", "mean_fill_mse", "hopfield_mse", "first_train_loss", "last_train_loss"}) {
    BOOST_TEST_INFO(k);
    BOOST_TEST(j.at(k).is_number());
    BOOST_TEST(j.at(k).get<double>() >= 0.0);
  }
  BOOST_TEST(j.at("mean_fill_mse").get<double>() > 0.0);
  BOOST_TEST(j.at("mode").get<std::string>() == "implicit");
  BOOST_TEST(j.at("heldout_digits").get<double>() == 40.0);
  // One-step Hopfield with many memories is at least as good as the mean.
  BOOST_TEST(j.at("hopfield_mse").get<double>() <= j.at("mean_fill_mse").get<double>());
  BOOST_TEST(ReadFile(dir.File("et.png")).compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  BOOST_TEST(ReadFile(dir.File("et.ckpt")).compare(0, 8, "IMPLCKPT") == 0);

  // Resume from step 4 to step 6.
  const auto r2 = RunCommand(Small(dir) + " --steps 6 --resume " + dir.File("et.ckpt") + " --json " +
                             dir.File("b.json"));
  BOOST_TEST_INFO("stdout:\n" << r2.out << "\nstderr:\n" << r2.err);
  BOOST_REQUIRE(r2.exit_code == 0);
  BOOST_TEST(r2.out.find("trained 2 steps") != std::string::npos);
  // The resumed run's evaluation uses the same masks, so its baselines match.
  const Json k = implicit::testing::ReadJson(dir.File("b.json"));
  BOOST_TEST(k.at("mean_fill_mse").get<double>() == j.at("mean_fill_mse").get<double>());
  BOOST_TEST(k.at("hopfield_mse").get<double>() == j.at("hopfield_mse").get<double>());
}

// SIGKILL at five seeded random points of a training run (one thread,
// a checkpoint after every step), then --resume to the same step count: the
// resumed run ends bit-identical to the uninterrupted one (held-out MSE and
// the first and last training losses compared exactly: the MSE is computed
// from the final parameters, the losses are kept in the checkpoints, also when
// the kill came after the last one), and no checkpoint temporary is left.
// 150 steps (50 in the sanitizer build, where each step is ~10x slower).
BOOST_AUTO_TEST_CASE(a_killed_run_resumes_bit_identically) {
  const std::string steps = implicit::testing::kSanitizedBuild ? "50" : "150";
  const std::string args = " --threads 1 --steps " + steps + " --checkpoint-every 1 --json ";
  ScratchDir reference_dir;
  const auto start = std::chrono::steady_clock::now();
  const auto reference = RunCommand(Small(reference_dir) + args + reference_dir.File("r.json"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_REQUIRE(reference.exit_code == 0);
  const Json expected = implicit::testing::ReadJson(reference_dir.File("r.json"));
  // Resumed from its own final checkpoint, a run trains nothing and reports
  // the same losses and MSE (the case of a kill after the last checkpoint).
  const auto again = RunCommand(Small(reference_dir) + args + reference_dir.File("again.json") + " --resume " +
                                reference_dir.File("et.ckpt"));
  BOOST_REQUIRE(again.exit_code == 0);
  const Json same = implicit::testing::ReadJson(reference_dir.File("again.json"));
  for (const char* field : {"heldout_mse", "first_train_loss", "last_train_loss"})
    BOOST_TEST(same.at(field).get<double>() == expected.at(field).get<double>(), field);
  std::mt19937 rng(45);
  int killed = 0;
  for (int k = 0; k < 5; ++k) {
    ScratchDir dir;
    const double at = std::uniform_real_distribution<double>(0.1, 0.9)(rng) * seconds;
    BOOST_TEST_CONTEXT("killed after " << at << " s of " << seconds << " s") {
      killed += implicit::testing::RunKilledMidRun(Small(dir) + args + dir.File("k.json"), at, dir, "k.log");
      // Killed before its first checkpoint, a run starts again from scratch.
      const bool has_checkpoint = std::ifstream(dir.File("et.ckpt")).good();
      const auto resumed = RunCommand(Small(dir) + args + dir.File("r.json") +
                                      (has_checkpoint ? " --resume " + dir.File("et.ckpt") : std::string()));
      BOOST_TEST_INFO(resumed.out << resumed.err);
      BOOST_REQUIRE(resumed.exit_code == 0);
      const Json j = implicit::testing::ReadJson(dir.File("r.json"));
      for (const char* field : {"heldout_mse", "first_train_loss", "last_train_loss", "hopfield_mse", "mean_fill_mse"})
        BOOST_TEST(j.at(field).get<double>() == expected.at(field).get<double>(), field);
      BOOST_TEST(implicit::testing::TemporaryFiles(dir.path).empty());
    }
  }
  BOOST_TEST_MESSAGE(killed << " of 5 runs were killed mid-training");
  BOOST_TEST(killed >= 3);  // a run that finished first was retried with less time (RunKilledMidRun)
}

BOOST_AUTO_TEST_CASE(unrolled_training_runs) {
  ScratchDir dir;
  const auto r = RunCommand(Small(dir) + " --steps 2 --unroll --unroll-steps 5 --json " + dir.File("u.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json j = implicit::testing::ReadJson(dir.File("u.json"));
  BOOST_TEST(j.at("mode").get<std::string>() == "unroll");
  BOOST_TEST(j.at("heldout_mse").get<double>() >= 0.0);
}

// A few hundred steps of the small model already complete held-out digits
// better than the mean of the training digits.
BOOST_AUTO_TEST_CASE(trained_model_beats_mean_fill) {
  ScratchDir dir;
  const auto r = RunCommand(Small(dir, 8, 100, "et.png", 16) + " --steps 400 --json " + dir.File("t.json"));
  BOOST_TEST_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json j = implicit::testing::ReadJson(dir.File("t.json"));
  BOOST_TEST(j.at("heldout_forward_status").get<std::string>() == "converged");
  BOOST_TEST(j.at("backward_failures").get<double>() == 0.0);
  BOOST_TEST(j.at("last_train_loss").get<double>() < j.at("first_train_loss").get<double>());
  BOOST_TEST(j.at("heldout_mse").get<double>() < 0.95 * j.at("mean_fill_mse").get<double>());
  // The paired per-digit difference averages to the difference of the MSEs
  // (every digit has the same number of masked pixels).
  BOOST_TEST(j.at("hopfield_difference").get<double>() == j.at("heldout_mse").get<double>() - j.at("hopfield_mse").get<double>(),
             boost::test_tools::tolerance(1e-9));
  BOOST_TEST(j.at("hopfield_difference_stderr").get<double>() > 0.0);
  BOOST_TEST(j.at("digits_better_than_hopfield").get<double>() >= 0.0);
  BOOST_TEST(j.at("digits_better_than_hopfield").get<double>() <= 100.0);
}

// The batch is shared out over threads, each with its own copy of the model;
// the shares' gradients are combined with weights proportional to their masked
// pixels, which is exactly the gradient of the whole batch. So the trained
// model and its results do not depend on the number of threads (to rounding).
BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_number_of_threads) {
  ScratchDir dir;
  std::vector<Json> runs;
  for (const int threads : {1, 4}) {
    const std::string json = dir.File("t" + std::to_string(threads) + ".json");
    const auto r = RunCommand(Small(dir) + " --steps 5 --threads " + std::to_string(threads) + " --json " + json);
    BOOST_TEST_INFO("stderr:\n" << r.err);
    BOOST_REQUIRE(r.exit_code == 0);
    runs.push_back(implicit::testing::ReadJson(json));
  }
  for (const char* k : {"first_train_loss", "last_train_loss", "heldout_mse"}) {
    BOOST_TEST_INFO(k);
    BOOST_TEST(runs[1].at(k).get<double>() == runs[0].at(k).get<double>(), boost::test_tools::tolerance(1e-9));
  }
  // Different data or a different step would change the loss far more.
  BOOST_TEST(runs[0].at("last_train_loss").get<double>() != runs[0].at("first_train_loss").get<double>());
}

// Every parameter block's gradient (embeddings, decoder, W_K, W_Q, Xi)
// against central differences of the loss, in both modes.
BOOST_AUTO_TEST_CASE(gradients_agree_with_finite_differences) {
  ScratchDir dir;
  for (const std::string mode : {"implicit", "unroll"}) {
    BOOST_TEST_CONTEXT(mode) {
      const auto r = RunCommand(Small(dir) + " --mode " + mode + " --check-gradients 10");
      BOOST_REQUIRE(r.exit_code == 0);
      const std::size_t at = r.out.find("largest abs error ");
      BOOST_REQUIRE(at != std::string::npos);
      BOOST_TEST(std::stod(r.out.substr(at + 18)) < 1e-7);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_input_and_bad_checkpoints) {
  ScratchDir dir;
  ExpectOneLineError(Small(dir) + " --masked 0", "--masked");
  ExpectOneLineError(Small(dir) + " --masked 16", "--masked");
  ExpectOneLineError(Small(dir) + " --lr -1", "--lr");
  ExpectOneLineError(Small(dir) + " --mode sideways", "--mode");
  ExpectOneLineError(Small(dir) + " --pos-dim 8", "--pos-dim");
  ExpectOneLineError(Small(dir) + " --energy-lr 0", "--energy-lr");
  ExpectOneLineError(Small(dir) + " --step 1.5", "--step");
  ExpectOneLineError(Small(dir) + " --threads 0", "--threads");
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

// --device cuda: what the device cannot do is refused before any work;
// without a GPU the run is one line naming why.
BOOST_AUTO_TEST_CASE(device_cuda_refuses_what_it_cannot_do) {
  ScratchDir dir;
  ExpectOneLineError(Small(dir) + " --device tpu", "--device");
  ExpectOneLineError(Small(dir) + " --device cuda --mode unroll", "--mode unroll");
  ExpectOneLineError(Small(dir) + " --device cuda --solver broyden", "picard and anderson");
  ExpectOneLineError(Small(dir) + " --device cuda --threads 2", "--threads");
  if (!implicit::cuda::Available()) ExpectOneLineError(Small(dir) + " --device cuda --steps 1", "CUDA");
}

// --device cuda on a GPU: the whole training gradient (embeddings, decoder,
// W_K, W_Q, Xi) through the device equilibrium and device adjoint against
// central differences, and a short training run that follows the CPU run with
// the same solver (same rules, so the same iterations; the adjoints differ
// only within their tolerance). The first loss is that of the same iterates
// up to the GEMMs' rounding, which Anderson's least squares amplify: 1.6e-9
// relative on an H200 (2026-11-30); a different iteration count would move it
// by the forward tolerance's order (1e-5 here), so 1e-8 still tells them apart.
BOOST_AUTO_TEST_CASE(device_cuda_trains_like_the_cpu, *boost::unit_test::precondition(implicit::testing::GpuPresent())) {
  ScratchDir dir;
  const auto check = RunCommand(Small(dir) + " --device cuda --check-gradients 10");
  BOOST_TEST_INFO("stdout:\n" << check.out << "\nstderr:\n" << check.err);
  BOOST_REQUIRE(check.exit_code == 0);
  const std::size_t at = check.out.find("largest abs error ");
  BOOST_REQUIRE(at != std::string::npos);
  BOOST_TEST(std::stod(check.out.substr(at + 18)) < 1e-7);
  std::vector<Json> runs;
  for (const std::string device : {"cpu", "cuda"}) {
    const std::string json = dir.File(device + ".json");
    const auto r = RunCommand(Small(dir) + " --solver anderson --threads 1 --steps 5 --device " + device +
                              " --json " + json);
    BOOST_TEST_INFO("stderr:\n" << r.err);
    BOOST_REQUIRE(r.exit_code == 0);
    runs.push_back(implicit::testing::ReadJson(json));
  }
  BOOST_TEST(runs[1].at("device").get<std::string>() == "cuda");
  BOOST_TEST(runs[1].at("first_train_loss").get<double>() == runs[0].at("first_train_loss").get<double>(),
             boost::test_tools::tolerance(1e-8));
  for (const char* k : {"last_train_loss", "heldout_mse"}) {
    BOOST_TEST_INFO(k);
    BOOST_TEST(runs[1].at(k).get<double>() == runs[0].at(k).get<double>(), boost::test_tools::tolerance(1e-5));
  }
}

// mpirun -np 2: the same run as one process to rounding; checkpoints resume
// with the other rank count; bad input ends the job with one message.
BOOST_AUTO_TEST_CASE(two_ranks_train_like_one_process_and_resume_across_rank_counts,
                     *boost::unit_test::precondition(implicit::testing::MpiPresent())) {
  const std::string kMpirun = implicit::testing::MpirunTwoRanks();
  ScratchDir dir;
  auto run = [&](const std::string& launcher, const std::string& name, const std::string& extra) {
    std::string command = Small(dir, 8, 40, name + ".png");  // its own checkpoint file
    command.replace(command.find(dir.File("et.ckpt")), dir.File("et.ckpt").size(), dir.File(name + ".ckpt"));
    const auto r = RunCommand(launcher + command + " --threads 1 --json " + dir.File(name + ".json") + extra);
    BOOST_TEST_INFO(launcher << name << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    BOOST_REQUIRE(r.exit_code == 0);
    BOOST_TEST(r.out.find("implicit-et:") == r.out.rfind("implicit-et:"));  // one rank prints
    return implicit::testing::ReadJson(dir.File(name + ".json"));
  };
  auto same = [](const Json& a, const Json& b) {
    for (const char* k : {"heldout_mse", "first_train_loss", "last_train_loss"}) {
      BOOST_TEST_INFO(k);
      BOOST_TEST(a.at(k).get<double>() == b.at(k).get<double>(), boost::test_tools::tolerance(1e-9));
    }
  };
  const Json one = run("", "one", " --steps 4");
  const Json two = run(kMpirun, "two", " --steps 4");
  same(one, two);
  // Resume each checkpoint with the other rank count: the same two steps.
  const Json one_then_two = run(kMpirun, "one_two", " --steps 6 --resume " + dir.File("one.ckpt"));
  const Json two_then_one = run("", "two_one", " --steps 6 --resume " + dir.File("two.ckpt"));
  same(one_then_two, two_then_one);
  // Bad input: every rank stops, one message, a nonzero status.
  const auto bad = RunCommand(kMpirun + Small(dir) + " --steps 2 --lr -1");
  BOOST_TEST(bad.exit_code != 0);
  BOOST_TEST(bad.err.find("--lr: must be > 0") != std::string::npos);
  BOOST_TEST(bad.err.find("--lr") == bad.err.rfind("--lr: must"));
}

// mpirun -np 2, one rank killed (SIGKILL) in the middle of training: the job
// ends with a nonzero status instead of hanging in the next collective, and
// the last checkpoint written before the kill resumes in one process.
BOOST_AUTO_TEST_CASE(a_killed_rank_ends_the_job_and_its_checkpoint_resumes,
                     *boost::unit_test::precondition(implicit::testing::MpiPresent())) {
  ScratchDir dir;
  const std::string ckpt = dir.File("et.ckpt");
  // Long enough not to end before the kill; a checkpoint every 2 steps.
  const std::string job = implicit::testing::MpirunTwoRanks() + Small(dir) +
                          " --threads 1 --steps 1000000 --checkpoint-every 2";
  const std::string script =
      job + " > " + dir.File("job.out") + " 2>&1 & job=$!\n"
      "for i in $(seq 600); do [ -s " + ckpt + " ] && break; sleep 0.1; done\n"
      "[ -s " + ckpt + " ] || { echo 'no checkpoint in 60 s'; kill -9 $job; exit 3; }\n"
      "rank=$(pgrep -P $job | head -n 1)\n"
      "[ -n \"$rank\" ] || { echo 'no rank process'; kill -9 $job; exit 3; }\n"
      "kill -9 $rank\n"
      "for i in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done\n"
      "if kill -0 $job 2>/dev/null; then echo 'hung after the kill'; kill -9 $job; exit 4; fi\n"
      "wait $job; echo \"job status $?\"\n";
  const auto killed = RunCommand("bash -c " + ShellQuote(script));
  BOOST_TEST_INFO("script:\n" << script << "\nout:\n" << killed.out << killed.err);
  BOOST_REQUIRE(killed.exit_code == 0);
  BOOST_TEST(killed.out.find("job status 0") == std::string::npos);
  BOOST_TEST(killed.out.find("job status") != std::string::npos);
  const auto resumed = RunCommand(Small(dir) + " --threads 1 --steps 1 --resume " + ckpt);
  BOOST_TEST_INFO(resumed.out << resumed.err);
  BOOST_TEST(resumed.exit_code == 0);
  BOOST_TEST(resumed.out.find("nothing to do") != std::string::npos);  // a checkpoint at step >= 2
}
#else
BOOST_AUTO_TEST_CASE(skipped_without_apps) {
  BOOST_TEST_MESSAGE("implicit-et was not built (IMPLICIT_BUILD_APPS=OFF): skipping");
}
#endif
