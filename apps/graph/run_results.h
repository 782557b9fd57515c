// What one (seed, detector) run of implicit-graph reports (SeedResult), the
// same as doubles (Pack, Unpack: gathered from the ranks, stored in
// checkpoints), and the checkpoint of the finished runs (--checkpoint,
// --resume: SaveFinishedRuns, LoadFinishedRuns).
#pragma once

#include "graph/settings.h"

#include <implicit/core/graph_data.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace implicit_apps {

// What one (seed, detector) run reports: the test metrics and how it trained.
struct SeedResult {
  long seed = 0;
  double auroc = 0, auprc = 0, macro_f1 = 0, validation_auroc = 0, ms_per_epoch = 0;
  double forward_iterations = 0, backward_iterations = 0;  // et only: mean per epoch
  int best_epoch = 0;
  int stopped_at_epoch = 0;  // et only: > 0 when a solve failed there (EtDetector::Result)
  int diverged_at_epoch = 0;  // > 0: the training diverged there (Diverged, detector_training.h)
};

// SeedResult as doubles: gathered from the ranks, stored in checkpoints.
constexpr std::size_t kSeedResultSize = 11;
void Pack(const SeedResult& r, std::vector<double>* out);
SeedResult Unpack(const double* v);

// Finished runs by "<detector>@<seed>": what a checkpoint holds.
using FinishedRuns = std::map<std::string, SeedResult>;
std::string RunName(const std::string& model, long seed);

// What a checkpoint's runs must have been computed with: the graph and SettingsJson.
std::string CheckpointKey(const Settings& s, const implicit::GraphDataset& g);

// The runs of --resume's checkpoint at `path`, which must hold `key`
// (CheckpointKey); errors start with --resume.
FinishedRuns LoadFinishedRuns(const std::string& path, const std::string& key);

// Writes `runs` and `key` as the checkpoint at `path` (errors start with
// --checkpoint).
void SaveFinishedRuns(const std::string& path, const std::string& key, const FinishedRuns& runs);

}  // namespace implicit_apps
