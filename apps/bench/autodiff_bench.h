// implicit-bench --autodiff: what a user energy's derivatives cost.
//
// For each state dimension n it times, per sample, the value of two energies
// written as user functors (AutoDiffEnergy) and their gradient and
// Hessian-vector product in forward mode (dual numbers) and in reverse mode
// (libimplicit's tape), each as a multiple of the value's time, for each way
// of writing the functor (--autodiff-styles: the ad:: blocks, Eigen
// expressions, scalar loops); for the retrieval
// energy also the built-in closed-form ModernHopfieldEnergy of the same energy:
//   retrieval   E(x) = 0.5|x|^2 - lse(beta P^T x) / beta, P n x N patterns
//   attention   x = T tokens of width 16 (n = 16 T); E = -sum_t lse_s(beta k_s.q_t)/beta
//               + 0.5|x|^2 - 0.5 sum_{t,mu} relu(xi_mu . x_t)^2 with k = W_K x_s,
//               q = W_Q x_t (one head, key width 16, 32 memories): the Energy
//               Transformer's attention and Hopfield terms without LayerNorm
//   et          the Energy Transformer's whole energy at implicit-et's sizes (17
//               tokens of width 32, 8 heads of width 8, 32 ReLU memories; n = 544)
//               with W_K, W_Q, Xi as trainable parameters, against the closed-form
//               EnergyTransformer; also the parameter VJP
// In reverse mode also a product of the Hessian recorded once at x
// (LinearizeHessian: the products of a Krylov solve at one point).
// Every figure is measured in the same run on this machine.
#pragma once

#include "common/json_output.h"

#include <string>
#include <vector>

namespace implicit_apps {

struct AutodiffBenchOptions {
  // Energies measured: "retrieval" and "attention" at each dimension, "et"
  // once at implicit-et's sizes.
  std::vector<std::string> energies = {"retrieval", "attention", "et"};
  // How the energies' functors are written: "blocks" (ad::Dot, ad::LogSumExp,
  // ad::Product), "eigen" (Eigen expressions), "loop" (scalar loops; the
  // retrieval energy only).
  std::vector<std::string> styles = {"blocks", "eigen", "loop"};
  std::vector<long> dimensions = {64, 256, 1024, 4096};
  long patterns = 256;  // N of the retrieval energy
  long samples = 4;     // samples per timed call
  long repeat = 3;      // timed calls; the median is reported
  // Forward mode costs about n (gradient) and 2n (HVP) evaluations: above
  // this many seconds for one estimated call it is timed on one sample once.
  double forward_budget = 2.0;
  bool quiet = false;
};

// Runs the measurements, prints the table and returns every number.
Json RunAutodiffBench(const AutodiffBenchOptions& options);

}  // namespace implicit_apps
