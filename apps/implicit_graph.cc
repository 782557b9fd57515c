// implicit-graph: node anomaly detection on attributed graphs (data/graphs).
//
//   implicit-graph                                  # gen_1000, 5 seeds, train ratio 0.4
//   implicit-graph --graph reddit --train-ratio 0.01 --seeds 10 --json out.json
//   implicit-graph --nodes my.nodes.csv --edges my.edges.csv
//
// For every seed it draws a stratified train / validation / test split, trains
// each detector on the training nodes (early stopping on validation AUROC) and
// scores the test nodes: AUROC, average precision (AUPRC) and macro-F1 at the
// threshold chosen on validation. It prints mean +- standard error over the
// seeds and the paired difference of the first detector to each other one.
// Detectors: "et", the graph Energy Transformer trained through its
// equilibrium with implicit gradients (graph/et_detector.h), and the
// baselines, logistic regression on the raw features ("lr-raw") and on the
// features with their neighbours' mean ("lr-neighbour-mean"), and a two-layer
// GCN ("gcn", graph/gcn_detector.h).
//
// The (seed, detector) runs are independent: `--threads T` runs T of them side
// by side (the ms/epoch column then measures them side by side too);
// `--checkpoint FILE` saves the finished runs' results after each round of
// runs, and `--resume FILE` skips the runs a checkpoint holds (with the same
// settings; --seeds and --models may differ, so a run can be extended). The
// results do not depend on --threads, ranks or resuming.
//
// A training that diverges (an epoch whose scores are not finite: a learning
// rate too large) stops there and is scored with its best epoch's parameters;
// the other runs go on, a line per diverged run says so, the JSON marks it
// (per_seed "diverged_at_epoch", "divergence"; "diverged_runs"), and the exit
// status is 3.
//
//   implicit-graph --graph reddit --seeds 5 --threads 2 --checkpoint reddit.ckpt
//   implicit-graph --graph reddit --seeds 10 --resume reddit.ckpt --checkpoint reddit.ckpt
//
// Under `mpirun -np K` (a build with MPI) the (seed, detector) runs are
// independent jobs dealt out over the ranks (job j to rank j mod K); rank 0
// gathers them and prints the same table and JSON as one process (the
// ms/epoch column then measures the runs side by side).
//
//   mpirun -np 2 implicit-graph --graph inj_cora --seeds 10
#include "common/cli.h"
#include "common/data_paths.h"
#include "common/format.h"
#include "common/json_output.h"
#include "common/output_files.h"
#include "common/progress.h"
#include "common/ranks.h"
#include "common/solvers.h"
#include "common/table.h"
#include "common/threads.h"
#include "graph/et_detector.h"
#include "graph/gcn_detector.h"
#include "graph/logistic_detector.h"
#include "graph/node_features.h"
#include "graph/run_results.h"
#include "graph/settings.h"

#include <implicit/core/checkpoint.h>
#include <implicit/core/classification_metrics.h>
#include <implicit/core/graph_data.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

// Scores of every node by `model`, trained on the split.
struct Trained {
  std::vector<double> scores;
  SeedResult info;
};

// What every detector's result reports.
Trained FromResult(const TrainingResult& r) {
  Trained t;
  t.scores = r.scores;
  t.info.validation_auroc = r.best_validation_auroc;
  t.info.best_epoch = r.best_epoch;
  t.info.ms_per_epoch = 1e3 * r.seconds_per_epoch;
  t.info.diverged_at_epoch = r.diverged_at_epoch;
  return t;
}

Trained TrainModel(const std::string& model, const implicit::GraphDataset& g, const std::vector<int>& anomalous,
                   const implicit::DataSplit& split, long seed, const Settings& s) {
  Matrix<double> x = Standardize(g.features, split.train);
  if (model == "et") {
    EtDetector::Options o = s.et;
    o.seed = static_cast<unsigned>(seed);
    const EtDetector::Result r = EtDetector(o).Train(g, x, anomalous, split);
    Trained t = FromResult(r);
    t.info.forward_iterations = r.forward_iterations;
    t.info.backward_iterations = r.backward_iterations;
    t.info.stopped_at_epoch = r.stopped_at_epoch;
    if (r.stopped_at_epoch > 0)  // the summary's line says where; this says why
      std::cerr << "et, seed " << seed << ", epoch " << r.stopped_at_epoch << ": " << r.stop_reason << "\n";
    return t;
  }
  if (model == "gcn") {
    GcnDetector::Options o;
    o.training = s.detector;
    o.hidden = s.gcn_hidden;
    o.seed = static_cast<unsigned>(seed);
    return FromResult(GcnDetector(o).Train(g, x, anomalous, split));
  }
  if (model == "lr-neighbour-mean") x = WithNeighbourMean(g, x);
  return FromResult(LogisticDetector(s.detector).Train(x, anomalous, split));
}

SeedResult RunOne(const std::string& model, const implicit::GraphDataset& g, const std::vector<int>& anomalous,
                  const implicit::DataSplit& split, long seed, const Settings& s) {
  const Trained r = TrainModel(model, g, anomalous, split, seed, s);
  const std::vector<int> test_labels = Subset(anomalous, split.test);
  const std::vector<double> test_scores = Subset(r.scores, split.test);
  const double threshold =
      implicit::BestMacroF1Threshold(Subset(r.scores, split.validation), Subset(anomalous, split.validation));
  SeedResult out = r.info;
  out.seed = seed;
  out.auroc = implicit::Auroc(test_scores, test_labels);
  out.auprc = implicit::AveragePrecision(test_scores, test_labels);
  out.macro_f1 = implicit::MacroF1(test_scores, test_labels, threshold);
  return out;
}

// The one line that reports a diverged training (Diverged, detector_training.h).
std::string DivergenceMessage(const std::string& model, const SeedResult& r) {
  return "training diverged at epoch " + std::to_string(r.diverged_at_epoch) + ": its " +
         (model == "et" ? "equilibrium is" : "scores are") +
         " not finite; scored with the best epoch's parameters (epoch " +
         std::to_string(r.best_epoch) + "); lower --lr";
}

// Mean and standard error of the mean (0 for one value).
std::pair<double, double> MeanAndError(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  if (v.size() < 2) return {mean, 0.0};
  double square = 0;
  for (double x : v) square += (x - mean) * (x - mean);
  return {mean, std::sqrt(square / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()))};
}

std::string PlusMinus(const std::pair<double, double>& m) { return FmtFixed(m.first, 3) + " ± " + FmtFixed(m.second, 3); }

// results[model][seed]. The runs not in --resume's checkpoint go in rounds of
// ranks x threads: run j of a round on rank j / threads, thread j mod threads;
// after each round every rank receives the round's results, and rank 0 saves
// the checkpoint.
std::vector<std::vector<SeedResult>> RunAll(const Settings& s, const implicit::GraphDataset& g,
                                            const std::vector<int>& anomalous, const implicit::Communicator& comm) {
  const std::string key = CheckpointKey(s, g);
  FinishedRuns finished;
  if (!s.resume.empty()) OnEveryRank(comm, [&] { finished = LoadFinishedRuns(s.resume, key); });
  struct Job {
    std::size_t model;
    long seed;
  };
  std::vector<Job> todo;
  for (long k = 0; k < s.seeds; ++k)
    for (std::size_t m = 0; m < s.models.size(); ++m)
      if (finished.count(RunName(s.models[m], s.seed + k)) == 0) todo.push_back({m, s.seed + k});
  const std::size_t runs = static_cast<std::size_t>(s.seeds) * s.models.size();
  if (!s.resume.empty() && !s.quiet)
    std::cerr << "implicit-graph: " << runs - todo.size() << " of " << runs << " runs resumed from '" << s.resume
              << "'\n";
  if (!s.checkpoint.empty() && comm.is_root())
    for (const std::string& f : implicit::RemoveStaleCheckpointTemporaries(s.checkpoint))
      if (!s.quiet) std::cerr << "implicit-graph: removed '" << f << "', left by a checkpoint writer that was killed\n";

  Progress progress(!s.quiet && comm.is_root());
  const std::size_t threads = static_cast<std::size_t>(s.threads), per_round = threads * comm.size();
  for (std::size_t round = 0; round < todo.size(); round += per_round) {
    const std::size_t first = round + static_cast<std::size_t>(comm.rank()) * threads;
    progress.Update("runs " + std::to_string(round + 1) + "-" + std::to_string(std::min(round + per_round, todo.size())) +
                    " of " + std::to_string(todo.size()) + " (" + s.models[todo[round].model] + ", seed " +
                    std::to_string(todo[round].seed) + (per_round > 1 ? ", ...)" : ")"));
    std::vector<std::vector<double>> packed(threads);
    OnEveryRank(comm, [&] {
      RunOnThreads(s.threads, [&](long t) {
        const std::size_t at = first + static_cast<std::size_t>(t);
        if (at >= todo.size()) return;
        const Job& job = todo[at];
        const implicit::DataSplit split = implicit::StratifiedSplit(anomalous, s.train_ratio, s.validation_ratio,
                                                                    static_cast<std::uint64_t>(job.seed));
        Pack(RunOne(s.models[job.model], g, anomalous, split, job.seed, s), &packed[static_cast<std::size_t>(t)]);
        packed[static_cast<std::size_t>(t)].push_back(static_cast<double>(job.model));
      });
    });
    std::vector<double> mine, all;
    for (const std::vector<double>& p : packed) mine.insert(mine.end(), p.begin(), p.end());
    comm.AllGather(mine, &all);
    for (std::size_t at = 0; at < all.size(); at += kSeedResultSize + 1) {
      const SeedResult r = Unpack(&all[at]);
      finished[RunName(s.models[static_cast<std::size_t>(all[at + kSeedResultSize])], r.seed)] = r;
    }
    if (!s.checkpoint.empty()) OnEveryRank(comm, [&] {
        if (comm.is_root()) SaveFinishedRuns(s.checkpoint, key, finished);
      });
  }
  progress.Done();
  std::vector<std::vector<SeedResult>> results(s.models.size());
  for (std::size_t m = 0; m < s.models.size(); ++m)
    for (long k = 0; k < s.seeds; ++k) results[m].push_back(finished.at(RunName(s.models[m], s.seed + k)));
  return results;
}

int Run(int argc, char** argv) {
  AppCommunicator();  // under mpirun: only rank 0 prints (parse errors included)
  Settings s;
  if (!Parse(argc, argv, &s)) return 0;
  const implicit::GraphDataset g = LoadGraph(s);
  std::vector<int> anomalous;
  for (int label : g.labels) anomalous.push_back(label > 0 ? 1 : 0);

  const implicit::Communicator& comm = AppCommunicator();
  const std::vector<std::vector<SeedResult>> results = RunAll(s, g, anomalous, comm);
  if (!comm.is_root()) return 0;

  auto metric = [&](std::size_t m, double SeedResult::*field) {
    std::vector<double> v;
    for (const SeedResult& r : results[m]) v.push_back(r.*field);
    return v;
  };
  std::cout << g.source << ": " << g.num_nodes() << " nodes, " << g.num_edges() << " directed edges, "
            << g.feature_dimension() << " features, " << g.num_anomalies() << " anomalies; train ratio "
            << Fmt(s.train_ratio) << ", " << s.seeds << " seeds\n\n";
  Table table({"detector", "test AUROC", "test AUPRC", "test macro-F1", "best epoch", "ms/epoch", "fwd/bwd iters"},
              {false, true, true, true, true, true, true});
  Json j;
  j["graph"] = s.nodes.empty() ? s.graph : g.source;
  j["nodes"] = g.num_nodes();
  j["directed_edges"] = g.num_edges();
  j["features"] = g.feature_dimension();
  j["anomalies"] = g.num_anomalies();
  j["settings"] = SettingsJson(s);
  j["settings"]["seeds"] = s.seeds;
  j["settings"]["seed"] = s.seed;
  j["settings"]["threads"] = s.threads;
  j["detectors"] = Json::array();
  for (std::size_t m = 0; m < s.models.size(); ++m) {
    const auto auroc = MeanAndError(metric(m, &SeedResult::auroc)), auprc = MeanAndError(metric(m, &SeedResult::auprc)),
               f1 = MeanAndError(metric(m, &SeedResult::macro_f1)), ms = MeanAndError(metric(m, &SeedResult::ms_per_epoch));
    double epochs = 0;
    for (const SeedResult& r : results[m]) epochs += r.best_epoch;
    epochs /= static_cast<double>(results[m].size());
    const std::string iterations =
        s.models[m] != "et" ? "-"
                            : Fmt(MeanAndError(metric(m, &SeedResult::forward_iterations)).first, 3) + "/" +
                                  Fmt(MeanAndError(metric(m, &SeedResult::backward_iterations)).first, 3);
    table.AddRow({s.models[m], PlusMinus(auroc), PlusMinus(auprc), PlusMinus(f1), Fmt(epochs, 3), Fmt(ms.first, 3),
                  iterations});
    Json d = {{"name", s.models[m]}, {"auroc_mean", auroc.first}, {"auroc_se", auroc.second},
              {"auprc_mean", auprc.first}, {"auprc_se", auprc.second}, {"macro_f1_mean", f1.first},
              {"macro_f1_se", f1.second}, {"ms_per_epoch", ms.first}, {"per_seed", Json::array()}};
    for (const SeedResult& r : results[m]) {
      Json row = {{"seed", r.seed}, {"auroc", r.auroc}, {"auprc", r.auprc}, {"macro_f1", r.macro_f1},
                  {"validation_auroc", r.validation_auroc}, {"best_epoch", r.best_epoch},
                  {"ms_per_epoch", r.ms_per_epoch}};
      if (s.models[m] == "et") {
        row["forward_iterations"] = r.forward_iterations;
        row["backward_iterations"] = r.backward_iterations;
        row["stopped_at_epoch"] = r.stopped_at_epoch;
      }
      row["diverged_at_epoch"] = r.diverged_at_epoch;
      if (r.diverged_at_epoch > 0) row["divergence"] = DivergenceMessage(s.models[m], r);
      d["per_seed"].push_back(row);
    }
    j["detectors"].push_back(d);
  }
  table.Print(std::cout);
  int diverged = 0;
  for (std::size_t m = 0; m < s.models.size(); ++m) {
    for (const SeedResult& r : results[m]) {
      if (r.diverged_at_epoch == 0) continue;
      ++diverged;
      std::cout << s.models[m] << ", seed " << r.seed << ": " << DivergenceMessage(s.models[m], r) << "\n";
    }
  }
  j["diverged_runs"] = diverged;
  for (std::size_t m = 0; m < s.models.size(); ++m)
    for (const SeedResult& r : results[m])
      if (r.stopped_at_epoch > 0)
        std::cout << s.models[m] << ", seed " << r.seed << ": training stopped at epoch " << r.stopped_at_epoch
                  << ", where a forward or adjoint solve did not converge; scored with the best parameters before "
                     "it (try --max-iter, --et-step, --solver)\n";
  j["paired"] = Json::array();
  if (s.models.size() > 1) {
    std::cout << "\npaired difference " << s.models[0] << " − detector (same splits; mean ± standard error over seeds)\n";
    Table paired({"detector", "Δ AUROC", "Δ AUPRC", "Δ macro-F1"}, {false, true, true, true});
    for (std::size_t m = 1; m < s.models.size(); ++m) {
      auto diff = [&](double SeedResult::*field) {
        std::vector<double> a = metric(0, field), b = metric(m, field);
        for (std::size_t k = 0; k < a.size(); ++k) a[k] -= b[k];
        return MeanAndError(a);
      };
      const auto da = diff(&SeedResult::auroc), dp = diff(&SeedResult::auprc), df = diff(&SeedResult::macro_f1);
      paired.AddRow({s.models[m], PlusMinus(da), PlusMinus(dp), PlusMinus(df)});
      j["paired"].push_back({{"detector", s.models[0]}, {"baseline", s.models[m]}, {"auroc_difference_mean", da.first},
                             {"auroc_difference_se", da.second}, {"auprc_difference_mean", dp.first},
                             {"auprc_difference_se", dp.second}, {"macro_f1_difference_mean", df.first},
                             {"macro_f1_difference_se", df.second}});
    }
    paired.Print(std::cout);
  }
  if (!s.json.empty()) WriteJsonFile(s.json, j, "--json");
  return diverged > 0 ? kDivergedExitStatus : 0;
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-graph", [&] { return implicit_apps::Run(argc, argv); });
}
