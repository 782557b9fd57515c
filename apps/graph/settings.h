// implicit-graph's settings: the detectors it knows, the Settings its
// command line fills (Parse: every flag, its checks and --help), those a run's
// results depend on (SettingsJson) and the graph they name (LoadGraph: --graph,
// or --nodes and --edges).
#pragma once

#include "common/json_output.h"
#include "graph/et_detector.h"
#include "graph/logistic_detector.h"

#include <implicit/core/graph_data.h>

#include <string>
#include <vector>

namespace implicit_apps {

// The detectors, in the order of the default --models.
extern const std::vector<std::string> kModels;

struct Settings {
  std::string graph = "gen_1000", nodes, edges, json, checkpoint, resume;
  double train_ratio = 0.4, validation_ratio = 0.2;
  long seeds = 5, seed = 1;
  std::vector<std::string> models = kModels;
  LogisticDetector::Options detector;
  EtDetector::Options et;
  long epochs = 300, et_epochs = 30, patience = 50, et_dim = 16, et_heads = 2, et_head_dim = 8, et_memories = 32, max_iter = 1000;
  long gcn_hidden = 16, threads = 1;
  std::string et_readout = "energies";
  bool quiet = false;
};

// The command line into `s`; false when it asked for --help.
bool Parse(int argc, char** argv, Settings* s);

// The settings a run's results depend on (all but --seeds, --seed, --models
// and where things are written), as in the JSON.
Json SettingsJson(const Settings& s);

// The graph of --nodes/--edges (errors start with the option whose file is at
// fault) or of --graph.
implicit::GraphDataset LoadGraph(const Settings& s);

}  // namespace implicit_apps
