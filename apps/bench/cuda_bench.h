// implicit-bench --device cuda: the equilibrium solves on the GPU against the
// cuBLAS GEMM floor of the same problem, measured in the same run.
//
// Problems (both Hopfield retrieval, the CCCP map xi <- X softmax(beta X^T xi)):
//   hopfield-digits    the 1797 digits stored (x/8 - 1), queries with pixels
//                      32..63 zeroed, beta 2, double, tolerance --tol
//   retrieval          N random patterns of width d (norm about 1), B queries
//                      near the first B of them, beta 16, float, tolerance
//                      --float-tol (default N 65536, d 256, B 4096)
//   et                 the Energy Transformer's clamped dynamics x <- x - 0.5 dE/dg
//                      in implicit-et's shape (17 tokens of 32, 8 heads of 8,
//                      32 ReLU memories, 8 of 16 patch tokens free), random
//                      clamped values, B = --et-samples (1024), double, tol 1e-6;
//                      no floor (several GEMM shapes); and a training step's
//                      equilibrium part (the first solver's forward solve + the
//                      IFT backward pass, adjoint tol 1e-8). The CPU reference
//                      (minutes: its ET path goes sample by sample) runs the
//                      first solver and the training step only
// For each problem it times the floor, the two GEMMs of one full-batch map
// evaluation (X^T Z and X P) with cuBLAS, then each device solver (after one
// warm-up solve, median of --repeat solves), and reports
//   x floor full-batch iter = (mean seconds of the iterations that began with all
//                             B samples active) / floor seconds
//   x floor / sample-iter   = (solve seconds / sample evaluations) / (floor seconds / B)
// (iterations are timed with the solver's iteration callback).
// and, for hopfield-digits, the same solves on the CPU (all cores) for the
// speed-up in the same run.
#pragma once

#include "common/json_output.h"

#include <implicit/core/digits.h>

#include <string>
#include <vector>

namespace implicit_apps {

struct DeviceBenchOptions {
  std::vector<std::string> problems = {"hopfield-digits", "retrieval", "et"};
  std::vector<std::string> solvers = {"picard", "anderson"};
  double tol = 1e-8, float_tol = 1e-5;
  long max_iter = 500, repeat = 5;
  long retrieval_patterns = 65536, retrieval_dimension = 256, retrieval_queries = 4096;
  double retrieval_beta = 16.0;
  long et_samples = 1024;
  double et_tol = 1e-6;
  bool tf32 = false;       // float GEMMs on TF32 tensor cores
  bool cpu_reference = true;
  bool quiet = false;
};

// Whether this build has the CUDA backend (else RunDeviceBench throws).
bool DeviceBenchAvailable();

// Runs the measurements, prints the tables and returns every number. Throws
// std::runtime_error without a usable device.
Json RunDeviceBench(const DeviceBenchOptions& options, const implicit::DigitsDataset& digits);

}  // namespace implicit_apps
