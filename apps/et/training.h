// implicit-et's training loop: Adam steps on random batches and masks from
// a start step (0, or where --resume left off) to --steps, with periodic
// checkpoints, a progress line, and the divergence rule; TrainStats is what
// it reports.
#pragma once

#include "et/checkpointing.h"
#include "et/config.h"
#include "et/optimizers.h"
#include "et/workers.h"

#include <implicit/core/communicator.h>

#include <string>
#include <vector>

namespace implicit_apps {

struct TrainStats {
  TrainingLosses losses;  // of every step trained so far, resumed ones included
  double seconds = 0;
  // Per step trained in this run: its wall-clock time, and of it the forward
  // solve and IFT backward pass (the slowest share's).
  std::vector<double> step_seconds, equilibrium_seconds;
  long backward_failures = 0, forward_unconverged = 0;
  long saved_step = -1;  // the last checkpoint this run wrote (-1: none)
  // > 0: the step whose loss or gradient was not finite (training stopped
  // there, with the parameters of the step before), and why.
  long diverged_at_step = 0;
  std::string divergence;
  long kept_step = 0;  // then: the parameters kept are those after this many steps
};

// What is on disk at --checkpoint for the message of a failed run.
std::string CheckpointState(const Config& c, const TrainStats& ts, long start_step);

// Training steps start_step..c.steps-1. A checkpoint of the parameters after
// k steps is written every --checkpoint-every steps, once step k + 1 has found
// a finite loss and finite gradients with them (so never from a diverged
// state); the final one by Run after the evaluation. A non-finite loss or
// gradient (the divergence rule of every trainer, docs/programs.md) stops the
// training there: the model goes back to the last parameters whose step had a
// finite loss and gradients (ts.kept_step), and ts.diverged_at_step says where.
TrainStats Train(const Config& c, const implicit::Communicator& comm, Workers& workers, Optimizers& adam,
                 const Matrix<double>& train, long start_step, const TrainingLosses& resumed);

}  // namespace implicit_apps
