// implicit-graph's command line, the settings in the JSON and the input graph
// (graph/settings.h).
#include "graph/settings.h"

#include "common/cli.h"
#include "common/data_paths.h"
#include "common/format.h"
#include "common/output_files.h"
#include "common/solvers.h"

#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {

const std::vector<std::string> kModels = {"et", "lr-raw", "lr-neighbour-mean", "gcn"};

namespace {

// A FIFO or a device would block or never end: --nodes and --edges must be
// regular files (LoadGraph names a missing or unreadable one).
void CheckRegularFile(const std::string& path, const std::string& option) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error(option + ": cannot read '" + path + "': not a regular file");
}

}  // namespace

Json SettingsJson(const Settings& s) {
  return {{"train_ratio", s.train_ratio}, {"validation_ratio", s.validation_ratio}, {"epochs", s.epochs},
          {"et_epochs", s.et_epochs}, {"patience", s.patience}, {"learning_rate", s.detector.learning_rate},
          {"weight_decay", s.detector.weight_decay}, {"gcn_hidden", s.gcn_hidden},
          {"et", {{"dim", s.et_dim}, {"heads", s.et_heads}, {"head_dim", s.et_head_dim},
                  {"memories", s.et_memories}, {"step", s.et.step}, {"init", s.et.init_scale}, {"solver", s.et.solver},
                  {"tolerance", s.et.tolerance}, {"max_iterations", s.max_iter}, {"readout", s.et_readout},
                  {"readout_hidden", s.et.readout_hidden}, {"input_hops", s.et.input_hops}}}};
}

// The graph of --nodes/--edges (errors start with the option whose file is at
// fault) or of --graph.
implicit::GraphDataset LoadGraph(const Settings& s) {
  if (s.nodes.empty()) return LoadShippedGraph(s.graph, "--graph");
  CheckRegularFile(s.nodes, "--nodes");
  CheckRegularFile(s.edges, "--edges");
  try {
    return implicit::LoadGraph(s.nodes, s.edges);
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    const bool edges = what.find("edges file '" + s.edges + "'") != std::string::npos;
    throw std::runtime_error((edges ? "--edges: " : "--nodes: ") + what);
  }
}

bool Parse(int argc, char** argv, Settings* s) {
  CLI::App app("Node anomaly detection on an attributed graph: stratified splits, detectors, "
               "AUROC / AUPRC / macro-F1 over seeds.", "implicit-graph");
  ConfigureApp(app);
  app.add_option("--graph", s->graph, "shipped graph: gen_1000, inj_cora or reddit")
      ->check(CLI::IsMember({"gen_1000", "inj_cora", "reddit"}));
  auto* nodes = app.add_option("--nodes", s->nodes, "nodes file (label,x0,x1,...) instead of --graph")->check(PathCheck());
  auto* edges = app.add_option("--edges", s->edges, "edges file (source,target) instead of --graph")->check(PathCheck());
  nodes->needs(edges);
  edges->needs(nodes);
  app.add_option("--train-ratio", s->train_ratio, "fraction of each class used for training")
      ->check(RealCheck([](double v) { return v > 0 && v < 1; }, "in (0, 1)"));
  app.add_option("--validation-ratio", s->validation_ratio, "fraction of each class for validation")
      ->check(RealCheck([](double v) { return v > 0 && v < 1; }, "in (0, 1)"));
  app.add_option("--seeds", s->seeds, "number of random splits")->check(IntIn(1, 1000));
  app.add_option("--seed", s->seed, "first seed (seeds seed .. seed + seeds - 1)")->check(IntIn(0, 1000000000));
  AddList(app, "--models", &s->models, "detectors: " + JoinNames(kModels), JoinNames(kModels, ","));
  app.add_option("--epochs", s->epochs, "training epochs at most (logistic detectors)")->check(IntIn(1, 1000000));
  app.add_option("--et-epochs", s->et_epochs, "et: training epochs at most (each solves the equilibrium and its adjoint)")
      ->check(IntIn(1, 1000000));
  app.add_option("--lr", s->detector.learning_rate, "Adam learning rate")->check(Positive());
  app.add_option("--weight-decay", s->detector.weight_decay, "decoupled weight decay")->check(AtLeast(0));
  app.add_option("--patience", s->patience, "epochs without a better validation AUROC before stopping")
      ->check(IntIn(1, 1000000));
  app.add_option("--et-dim", s->et_dim, "et: node state dimension D")->check(IntIn(2, 4096));
  app.add_option("--et-heads", s->et_heads, "et: attention heads")->check(IntIn(0, 64));
  app.add_option("--et-head-dim", s->et_head_dim, "et: key/query dimension per head")->check(IntIn(1, 4096));
  app.add_option("--et-memories", s->et_memories, "et: Hopfield memories")->check(IntIn(0, 100000));
  app.add_option("--et-step", s->et.step, "et: step of the map x <- x - step dE/dg")->check(Positive());
  app.add_option("--et-init", s->et.init_scale, "et: W_K, W_Q, Xi start at N(0, (init / sqrt(D))^2)")
      ->check(RealCheck([](double v) { return v >= 0 && v <= 100; }, "in [0, 100]"));
  app.add_option("--et-readout", s->et_readout,
                 "et: the score reads each node's energy terms at the equilibrium (attention per head, "
                 "memories), its state, or both")
      ->check(CLI::IsMember({"energies", "states", "states+energies"}));
  app.add_option("--et-hidden", s->et.readout_hidden,
                 "et: hidden ReLU units between what the readout reads and the score (0: linear score)")
      ->check(IntIn(0, 4096));
  app.add_option("--et-hops", s->et.input_hops,
                 "et: W_in also projects the features after 1..K rounds of the GCN's propagation "
                 "D^-1/2 (A + I) D^-1/2 (0: the features only)")
      ->check(IntIn(0, 8));
  app.add_option("--solver", s->et.solver, "et: forward solver")->check(SolverNameCheck());
  app.add_option("--tol", s->et.tolerance, "et: forward and adjoint tolerance")->check(Positive());
  app.add_option("--max-iter", s->max_iter, "et: forward iteration budget")->check(IntIn(1, 1000000));
  app.add_option("--gcn-hidden", s->gcn_hidden, "gcn: hidden units")->check(IntIn(1, 4096));
  app.add_option("--threads", s->threads, "(seed, detector) runs side by side (results do not depend on it)")
      ->check(IntIn(1, 64));
  app.add_option("--checkpoint", s->checkpoint, "save the finished runs' results to this file as they finish")
      ->check(PathCheck());
  app.add_option("--resume", s->resume, "skip the runs this checkpoint holds (same settings; may be --checkpoint)")
      ->check(PathCheck());
  app.add_option("--json", s->json, "write the results as JSON")->check(PathCheck());
  app.add_flag("--quiet", s->quiet, "no progress line on stderr");
  if (!implicit_apps::Parse(app, argc, argv)) return false;
  Require(s->train_ratio + s->validation_ratio < 1,
          "--validation-ratio: --train-ratio + --validation-ratio must be < 1, got " +
              Fmt(s->train_ratio + s->validation_ratio));
  for (const std::string& m : s->models)
    Require(std::find(kModels.begin(), kModels.end(), m) != kModels.end(),
            "--models: unknown detector '" + Excerpt(m) + "' (available: " + JoinNames(kModels) + ")");
  s->detector.epochs = static_cast<int>(s->epochs);
  s->detector.patience = static_cast<int>(s->patience);
  s->et.training = s->detector;
  s->et.training.epochs = static_cast<int>(s->et_epochs);
  s->et.energy.node_dim = s->et_dim;
  s->et.energy.num_heads = s->et_heads;
  s->et.energy.head_dim = s->et_head_dim;
  s->et.energy.num_memories = s->et_memories;
  s->et.max_iterations = static_cast<int>(s->max_iter);
  s->et.readout = s->et_readout == "energies" ? EtReadout::kEnergies
                  : s->et_readout == "states"  ? EtReadout::kStates
                                               : EtReadout::kStatesEnergies;
  CheckWritable(s->json, "--json");
  CheckWritable(s->checkpoint, "--checkpoint", true);
  CheckDistinctFiles({{"--checkpoint", s->checkpoint}, {"--json", s->json}},
                     {{"--nodes", s->nodes}, {"--edges", s->edges}});
  CheckDistinctFiles({{"--json", s->json}}, {{"--resume", s->resume}});
  return true;
}

}  // namespace implicit_apps
