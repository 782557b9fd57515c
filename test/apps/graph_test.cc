// End-to-end runs of implicit-graph on the small shipped graph (gen_1000): the
// JSON holds one result per seed and detector, its scores lie in [0, 1], the
// summaries are the means of the per-seed values and the paired differences
// the means of the per-seed differences (first detector minus the other); the same seeds give the same
// results, also on two threads and when resumed from a checkpoint; the GCN
// baseline beats a random scorer; bad input is a one-line error naming the
// flag or file.
#define BOOST_TEST_MODULE graph
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include <chrono>
#include <fstream>
#include <random>
#include <string>

using implicit::testing::Json;
using implicit::testing::RunCommand;
using implicit::testing::ScratchDir;

#ifdef IMPLICIT_APP_GRAPH
namespace {

const std::string kApp = IMPLICIT_APP_GRAPH;

Json RunJson(const std::string& args, const ScratchDir& dir, const std::string& name = "g.json") {
  const auto r = RunCommand(kApp + " " + args + " --quiet --json " + dir.File(name));
  BOOST_TEST_INFO("args: " << args << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  return implicit::testing::ReadJson(dir.File(name));
}

bool IsScore(const Json& v) { return v.is_number() && v.get<double>() >= 0.0 && v.get<double>() <= 1.0; }

}  // namespace

BOOST_AUTO_TEST_CASE(results_per_seed_and_their_summaries) {
  ScratchDir dir;
  const Json j = RunJson("--models lr-raw,lr-neighbour-mean --seeds 3 --epochs 60", dir);
  BOOST_TEST(j.at("nodes").get<int>() == 1000);
  BOOST_TEST(j.at("anomalies").get<int>() == 20);
  const Json& detectors = j.at("detectors");
  BOOST_REQUIRE(detectors.size() == 2u);
  for (const Json& d : detectors) {
    BOOST_REQUIRE(d.at("per_seed").size() == 3u);
    double mean = 0;
    for (const Json& r : d.at("per_seed")) {
      BOOST_TEST(IsScore(r.at("auroc")));
      BOOST_TEST(IsScore(r.at("auprc")));
      BOOST_TEST(IsScore(r.at("macro_f1")));
      BOOST_TEST(IsScore(r.at("validation_auroc")));
      mean += r.at("auroc").get<double>() / 3;
    }
    BOOST_TEST(d.at("auroc_mean").get<double>() == mean, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(d.at("auroc_se").get<double>() >= 0.0);
  }
  // Paired: the first detector minus each other one, seed by seed.
  double difference = 0;
  for (int k = 0; k < 3; ++k)
    difference += (detectors[0].at("per_seed")[k].at("auroc").get<double>() -
                   detectors[1].at("per_seed")[k].at("auroc").get<double>()) / 3;
  BOOST_TEST(j.at("paired")[0].at("auroc_difference_mean").get<double>() == difference,
             boost::test_tools::tolerance(1e-12));
  // The same seeds give the same splits and the same results (all but the timings).
  const Json again = RunJson("--models lr-raw,lr-neighbour-mean --seeds 3 --epochs 60", dir, "again.json");
  for (std::size_t m = 0; m < 2; ++m)
    for (int k = 0; k < 3; ++k)
      for (const char* field : {"auroc", "auprc", "macro_f1", "validation_auroc", "best_epoch"})
        BOOST_TEST(again.at("detectors")[m].at("per_seed")[k].at(field) == detectors[m].at("per_seed")[k].at(field));
}

// The graph Energy Transformer trains through its equilibrium on a small graph
// given as files: every epoch's forward and adjoint solves converge (else the
// run fails), and it reports their iteration counts.
BOOST_AUTO_TEST_CASE(energy_transformer_on_nodes_and_edges_files) {
  ScratchDir dir;
  std::ofstream(dir.File("n.csv")) << "# label,x0,x1\n0,0,1\n0,1,0\n1,5,5\n0,0,0\n1,6,4\n0,1,1\n1,5,6\n0,0,1\n";
  std::ofstream(dir.File("e.csv")) << "0,1\n1,2\n2,3\n4,5\n6,7\n";
  const Json j = RunJson("--nodes " + dir.File("n.csv") + " --edges " + dir.File("e.csv") +
                             " --train-ratio 0.4 --validation-ratio 0.3 --seeds 2 --epochs 20 --et-epochs 3"
                             " --et-dim 4 --et-heads 1 --et-head-dim 2 --et-memories 4",
                         dir);
  BOOST_TEST(j.at("nodes").get<int>() == 8);
  BOOST_TEST(j.at("anomalies").get<int>() == 3);
  const Json& et = j.at("detectors")[0];
  BOOST_TEST(et.at("name").get<std::string>() == "et");
  for (const Json& r : et.at("per_seed")) {
    BOOST_TEST(IsScore(r.at("auroc")));
    BOOST_TEST(r.at("forward_iterations").get<double>() > 0.0);
    BOOST_TEST(r.at("backward_iterations").get<double>() > 0.0);
  }
  BOOST_TEST(j.at("paired").size() == 3u);  // et against each baseline
}

// SIGKILL at five seeded random points of a run of small ET detectors (one
// thread; the checkpoint is saved after each finished run), then --resume
// from that checkpoint: every seed's results equal the uninterrupted run's
// exactly, and no checkpoint temporary is left.
// Six seeds (three in the sanitizer build, where each is ~10x slower).
BOOST_AUTO_TEST_CASE(a_killed_run_resumes_bit_identically) {
  const int seeds = implicit::testing::kSanitizedBuild ? 3 : 6;
  const std::string options = "--models et --seeds " + std::to_string(seeds) +
                              " --et-dim 4 --et-heads 1 --et-head-dim 2 --et-memories 4 --et-epochs 5 --threads 1";
  const std::string args = kApp + " " + options + " --quiet";
  ScratchDir reference_dir;
  const auto start = std::chrono::steady_clock::now();
  const Json expected = RunJson(options, reference_dir, "r.json");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::mt19937 rng(45);
  int killed = 0;
  for (int k = 0; k < 5; ++k) {
    ScratchDir dir;
    const std::string checkpoint = " --checkpoint " + dir.File("runs.ckpt");
    const double at = std::uniform_real_distribution<double>(0.1, 0.9)(rng) * seconds;
    BOOST_TEST_CONTEXT("killed after " << at << " s of " << seconds << " s") {
      killed += implicit::testing::RunKilledMidRun(args + checkpoint, at, dir, "k.log");
      const bool has_checkpoint = std::ifstream(dir.File("runs.ckpt")).good();
      const auto resumed = RunCommand(args + checkpoint + " --json " + dir.File("r.json") +
                                      (has_checkpoint ? " --resume " + dir.File("runs.ckpt") : std::string()));
      BOOST_TEST_INFO(resumed.out << resumed.err);
      BOOST_REQUIRE(resumed.exit_code == 0);
      const Json j = implicit::testing::ReadJson(dir.File("r.json"));
      for (int seed = 0; seed < seeds; ++seed)
        for (const char* field : {"seed", "auroc", "auprc", "macro_f1", "validation_auroc", "best_epoch",
                                  "forward_iterations", "backward_iterations"}) {
          BOOST_TEST_INFO("seed " << seed << " " << field);
          BOOST_TEST(j.at("detectors")[0].at("per_seed")[seed].at(field) ==
                     expected.at("detectors")[0].at("per_seed")[seed].at(field));
        }
      BOOST_TEST(implicit::testing::TemporaryFiles(dir.path).empty());
    }
  }
  BOOST_TEST_MESSAGE(killed << " of 5 runs were killed");
  BOOST_TEST(killed >= 3);  // a run that finished first was retried with less time (RunKilledMidRun)
}

// The GCN baseline, end to end on gen_1000: better than a random scorer
// (AUROC 0.5) on the held-out nodes of every seed.
BOOST_AUTO_TEST_CASE(gcn_beats_a_random_scorer) {
  ScratchDir dir;
  const Json j = RunJson("--models gcn --seeds 3", dir);
  for (const Json& r : j.at("detectors")[0].at("per_seed")) BOOST_TEST(r.at("auroc").get<double>() > 0.6);
}

// The ET end to end on gen_1000 (issue 12's test): with its default readout,
// the node energies at the equilibrium, better than a random scorer on the
// held-out nodes of every seed. A small ET (D 4, one head, 4 memories, 5
// epochs) keeps it to a fraction of a second here and seconds in the -O0
// sanitizer build (the default sizes took over 15 minutes there).
BOOST_AUTO_TEST_CASE(et_beats_a_random_scorer) {
  ScratchDir dir;
  const Json j = RunJson("--models et --seeds 2 --et-dim 4 --et-heads 1 --et-head-dim 2 --et-memories 4 --et-epochs 5",
                         dir);
  BOOST_TEST(j.at("settings").at("et").at("readout").get<std::string>() == "energies");
  for (const Json& r : j.at("detectors")[0].at("per_seed")) BOOST_TEST(r.at("auroc").get<double>() > 0.6);
  // The other readouts train too (the states alone: no energy rows read), and
  // with a hidden layer, and without the propagated input (--et-hops 0).
  for (const std::string readout : {"states --et-hops 0", "states+energies --et-hidden 3"}) {
    const Json other = RunJson("--models et --seeds 1 --et-dim 4 --et-heads 1 --et-head-dim 2 --et-memories 4 "
                               "--et-epochs 3 --et-readout " + readout, dir, "other.json");
    BOOST_TEST(other.at("settings").at("et").at("readout").get<std::string>() == readout.substr(0, readout.find(' ')));
    BOOST_TEST(other.at("settings").at("et").at("readout_hidden").get<int>() ==
               (readout.find("hidden") != std::string::npos ? 3 : 0));
    BOOST_TEST(other.at("settings").at("et").at("input_hops").get<int>() ==
               (readout.find("hops") != std::string::npos ? 0 : 2));
    BOOST_TEST(other.at("detectors")[0].at("per_seed").size() == 1u);
  }
}

// --threads and --checkpoint / --resume change how the (seed, detector) runs
// are scheduled, never their results: a run on two threads, and a run of one
// seed extended to three from its checkpoint, equal the plain run.
BOOST_AUTO_TEST_CASE(threads_and_resumed_runs_give_the_same_results) {
  ScratchDir dir;
  const std::string args = "--models gcn,lr-raw --epochs 10";
  const Json plain = RunJson(args + " --seeds 3", dir, "plain.json");
  const Json threads = RunJson(args + " --seeds 3 --threads 2", dir, "threads.json");
  RunJson(args + " --seeds 1 --checkpoint " + dir.File("runs.ckpt"), dir, "first.json");
  const auto resumed = RunCommand(kApp + " " + args + " --seeds 3 --resume " + dir.File("runs.ckpt") +
                                  " --checkpoint " + dir.File("runs.ckpt") + " --json " + dir.File("resumed.json"));
  BOOST_TEST_INFO(resumed.out << resumed.err);
  BOOST_REQUIRE(resumed.exit_code == 0);
  BOOST_TEST(resumed.err.find("2 of 6 runs resumed") != std::string::npos);
  const Json again = implicit::testing::ReadJson(dir.File("resumed.json"));
  for (const Json* other : {&threads, &again}) {
    for (std::size_t m = 0; m < 2; ++m)
      for (int k = 0; k < 3; ++k)
        for (const char* field : {"seed", "auroc", "auprc", "macro_f1", "validation_auroc", "best_epoch"}) {
          BOOST_TEST_INFO("detector " << m << " seed " << k << " " << field);
          BOOST_TEST(other->at("detectors")[m].at("per_seed")[k].at(field) ==
                     plain.at("detectors")[m].at("per_seed")[k].at(field));
        }
    BOOST_TEST(other->at("paired") == plain.at("paired"));
  }
  // A checkpoint of other settings is refused, naming the first difference.
  implicit::testing::ExpectOneLineError(kApp + " --models gcn,lr-raw --quiet --epochs 11 --resume " + dir.File("runs.ckpt"),
                                        "/epochs 10 there, 11 here", 1, "implicit-graph");
}

// A solve that fails after the first epoch ends the ET's training there, with
// the best parameters before it (reported per seed and in a line); in the
// first epoch it is an error naming the solve. The small ET of the test
// above: with 6 forward iterations its solves stop converging after a few
// epochs (at epoch 9 here, with the default Broyden), with one in the first.
BOOST_AUTO_TEST_CASE(et_training_stops_where_a_solve_fails) {
  ScratchDir dir;
  const std::string args = "--models et --seeds 1 --et-epochs 30 --patience 100 --et-dim 4 --et-heads 1 "
                           "--et-head-dim 2 --et-memories 4 --max-iter ";
  const auto r = RunCommand(kApp + " " + args + "6 --quiet --json " + dir.File("g.json"));
  BOOST_TEST_INFO(r.out << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  const Json seed = implicit::testing::ReadJson(dir.File("g.json")).at("detectors")[0].at("per_seed")[0];
  const int stopped = seed.at("stopped_at_epoch").get<int>();
  BOOST_TEST(stopped > 1);
  BOOST_TEST(seed.at("best_epoch").get<int>() < stopped);
  BOOST_TEST(r.out.find("training stopped at epoch " + std::to_string(stopped)) != std::string::npos);
  implicit::testing::ExpectOneLineError(kApp + " " + args + "1 --quiet", "forward solve ended max_iterations", 1,
                                        "implicit-graph");
}

// The divergence rule: with --lr 1e300 every detector's first steps blow its
// scores (the ET: its equilibrium) up. Each training stops at the diverged
// epoch and is scored with its best epoch's parameters; every detector and
// seed still finishes with finite results, a line per run says so, the JSON
// marks the runs, and the exit status is 3.
BOOST_AUTO_TEST_CASE(diverging_trainings_end_cleanly) {
  ScratchDir dir;
  const auto r = RunCommand(kApp + " --models et,lr-raw,gcn --lr 1e300 --seeds 2 --epochs 20 --et-epochs 5 "
                                   "--et-dim 4 --et-heads 1 --et-head-dim 2 --et-memories 4 --quiet --json " +
                            dir.File("d.json"));
  BOOST_TEST_INFO(r.out << r.err);
  BOOST_TEST(r.exit_code == 3);
  const Json j = implicit::testing::ReadJson(dir.File("d.json"));
  BOOST_TEST(j.at("diverged_runs").get<int>() == 6);
  for (const Json& detector : j.at("detectors")) {
    for (const Json& seed : detector.at("per_seed")) {
      BOOST_TEST_INFO(detector.at("name") << " seed " << seed.at("seed"));
      const int diverged = seed.at("diverged_at_epoch").get<int>();
      BOOST_TEST(diverged >= 1);
      BOOST_TEST(seed.at("best_epoch").get<int>() < diverged);
      BOOST_TEST(IsScore(seed.at("auroc")));
      const std::string line = detector.at("name").get<std::string>() + ", seed " +
                               std::to_string(seed.at("seed").get<int>()) + ": training diverged at epoch " +
                               std::to_string(diverged);
      BOOST_TEST(r.out.find(line) != std::string::npos);
      BOOST_TEST(seed.at("divergence").get<std::string>().find("lower --lr") != std::string::npos);
    }
  }
  // A sound learning rate: nothing diverges, exit status 0.
  const Json sound = RunJson("--models lr-raw --seeds 1 --epochs 20", dir, "s.json");
  BOOST_TEST(sound.at("diverged_runs").get<int>() == 0);
  BOOST_TEST(sound.at("detectors")[0].at("per_seed")[0].at("diverged_at_epoch").get<int>() == 0);
}

BOOST_AUTO_TEST_CASE(bad_input_is_a_one_line_error) {
  ScratchDir dir;
  auto expect = [](const std::string& args, const std::string& what, int status) {
    implicit::testing::ExpectOneLineError(kApp + " " + args, what, status, "implicit-graph");
  };
  expect("--train-ratio 1.5", "--train-ratio", 2);
  expect("--train-ratio 0.7 --validation-ratio 0.3", "--validation-ratio", 2);
  expect("--seeds 0", "--seeds", 2);
  expect("--graph cora", "--graph", 2);
  expect("--models lr-raw,svm", "--models", 2);
  expect("--nodes " + dir.File("n.csv"), "--edges", 2);
  expect("--json ''", "--json", 2);
  expect("--nodes " + dir.File("missing.csv") + " --edges " + dir.File("missing2.csv"), "missing.csv", 1);
  std::ofstream(dir.File("bad.csv")) << "0,1\nx,2\n";
  std::ofstream(dir.File("e.csv")) << "0,1\n";
  expect("--nodes " + dir.File("bad.csv") + " --edges " + dir.File("e.csv"), "line 2", 1);
  expect("--json " + dir.path, "--json", 1);
}
// mpirun -np 2: the (seed, detector) runs dealt out over two ranks give the
// one-process results exactly; one rank prints.
BOOST_AUTO_TEST_CASE(two_ranks_give_the_one_process_results,
                     *boost::unit_test::precondition(implicit::testing::MpiPresent())) {
  ScratchDir dir;
  const std::string args = " --quiet --models lr-raw,lr-neighbour-mean --seeds 3 --json ";
  const auto one = RunCommand(kApp + args + dir.File("one.json"));
  const auto two = RunCommand(implicit::testing::MpirunTwoRanks() + kApp + args + dir.File("two.json"));
  BOOST_TEST_INFO("one:\n" << one.out << one.err << "\ntwo:\n" << two.out << two.err);
  BOOST_REQUIRE(one.exit_code == 0);
  BOOST_REQUIRE(two.exit_code == 0);
  BOOST_TEST(implicit::testing::CountLines(two.out) == implicit::testing::CountLines(one.out));
  const Json a = implicit::testing::ReadJson(dir.File("one.json"));
  const Json b = implicit::testing::ReadJson(dir.File("two.json"));
  BOOST_REQUIRE(a.at("detectors").size() == b.at("detectors").size());
  for (std::size_t d = 0; d < a.at("detectors").size(); ++d) {
    const Json& x = a.at("detectors")[d];
    const Json& y = b.at("detectors")[d];
    BOOST_REQUIRE(x.at("per_seed").size() == y.at("per_seed").size());
    for (std::size_t k = 0; k < x.at("per_seed").size(); ++k) {
      for (const char* field : {"seed", "auroc", "auprc", "macro_f1", "validation_auroc", "best_epoch"}) {
        BOOST_TEST_INFO(x.at("name").get<std::string>() << " seed " << k << " " << field);
        BOOST_TEST(y.at("per_seed")[k].at(field).get<double>() == x.at("per_seed")[k].at(field).get<double>());
      }
    }
  }
  BOOST_TEST(a.at("paired") == b.at("paired"));
}

#else
BOOST_AUTO_TEST_CASE(skipped_without_apps) {
  BOOST_TEST_MESSAGE("implicit-graph was not built (IMPLICIT_BUILD_APPS=OFF): skipping");
}
#endif
