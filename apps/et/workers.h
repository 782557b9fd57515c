// implicit-et's data parallelism: Workers, identical copies of the model
// (one per --threads) that share each batch, and under MPI the ranks' shards
// of it, for the training gradients and the held-out predictions.
#pragma once

#include "et/config.h"
#include "et/model.h"

#include <implicit/core/communicator.h>

#include <memory>
#include <vector>

namespace implicit_apps {

// The batch split over identical copies of the model, one per thread: each
// copy computes the gradients of its share of the digits (the samples are
// independent), and the shares are combined with weights proportional to their
// masked pixels, which gives exactly the gradient of the whole batch's loss.
// main() is the model that is trained; Sync() copies its parameters to the
// others after each update. An exception in any share is rethrown once all
// threads have finished.
class Workers {
 public:
  Workers(const Config& c, long threads) {
    for (long t = 0; t < threads; ++t) models_.push_back(std::make_unique<EtModel>(c));
  }
  EtModel& main() { return *models_.front(); }
  void Sync();
  // Under MPI each rank takes its shard of the batch (ShardOf) and shares it
  // out over its threads; the weighted sums are then summed over the ranks.
  StepStats Gradients(const Config& c, const Matrix<double>& patches, const Matrix<double>& patch_mask,
                      const implicit::Communicator& comm, Vector<double>* gm, Vector<double>* ge);

  // Predictions for `patches` (the same on every rank): this rank's shard of
  // them (ShardOf) split over its threads' copies of the model; every rank
  // receives all predictions and the Summary of the equilibrium solves merged
  // in sample order (MergeShardSummaries, GatherShardSummaries; none when
  // unrolling).
  Matrix<double> Predict(const Config& c, const Matrix<double>& patches, const Matrix<double>& patch_mask,
                         const implicit::Communicator& comm, implicit::Summary* summary);

 private:
  std::vector<std::unique_ptr<EtModel>> models_;
};

}  // namespace implicit_apps
