// implicit-et's held-out evaluation: the trained ET, mean fill and the best
// one-step Hopfield completion on the same fixed masks, and the paired
// per-digit difference of the ET and Hopfield.
#pragma once

#include "et/config.h"
#include "et/workers.h"

#include <implicit/core/communicator.h>
#include <implicit/solvers/solver.h>

namespace implicit_apps {

// The held-out evaluation on fixed masks: the ET, mean fill and the best
// one-step Hopfield completion, and the paired per-digit difference ET - Hopfield.
struct Evaluation {
  Matrix<double> masks, pixel_mask, pred, hop_pred;
  implicit::Summary summary;
  double et_mse = 0, mean_mse = 0, hop_mse = 1e300, best_beta = 0, diff_mean = 0, diff_stderr = 0;
  long better = 0;
};


Evaluation Evaluate(const Config& c, Workers& workers, const implicit::Communicator& comm, const Matrix<double>& train,
                    const Matrix<double>& test);

}  // namespace implicit_apps
