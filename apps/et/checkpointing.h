// implicit-et's checkpoints: what they hold (parameters, both optimisers'
// state, the training losses so far, the model and data keys), writing one
// (Save) and resuming from one (Resume), which must match this run's model
// and training digits.
#pragma once

#include "et/config.h"
#include "et/model.h"
#include "et/optimizers.h"
#include "et/workers.h"

#include <string>

namespace implicit_apps {

// The training losses a run reports, kept in its checkpoints so that a
// resumed run reports what the uninterrupted one would: the first step's and
// the latest step's (first < 0: no step yet). Stored exactly (hex floats).
struct TrainingLosses {
  double first = -1, last = 0;
};

// Restores parameters, optimiser state and the losses so far (*losses) from
// --resume; returns the step it was saved at.
long Resume(const Config& c, Workers& workers, Optimizers& adam, TrainingLosses* losses);

// Writes the checkpoint of `step` (only finite parameters are ever written)
// with the losses of the steps up to it.
void Save(const Config& c, long step, EtModel& model, const Optimizers& adam, const TrainingLosses& losses);

// "<n> training digits, fnv1a <hash of their pixels>": what a checkpoint was trained on.
std::string DataKey(const Matrix<double>& train);

}  // namespace implicit_apps
