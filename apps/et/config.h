// implicit-et's settings: the patch layout of a digit, the Config that the
// command line fills (ParseConfig: options, their checks and --help) and the
// model key a checkpoint must match (ConfigKey).
#pragma once

#include "problems/problem.h"

#include <algorithm>
#include <string>
#include <thread>

namespace implicit_apps {

constexpr Index kPatches = 16, kTokens = 17, kPatchSize = 4;

struct Config {
  long check_gradients = 0;
  long threads = std::max(1L, std::min(64L, static_cast<long>(std::thread::hardware_concurrency())));
  bool threads_given = false;  // --threads on the command line (else shared out over MPI ranks)
  long steps = 4000, batch = 32, masked = 8, unroll_steps = 20, dim = 32, heads = 8, head_dim = 8,
       memories = 32, pos_dim = 8, max_iter = 200, holdout = 297, seed = 1, checkpoint_every = 100;
  double backward_tol = 1e-8;
  double lr = 0.02, energy_lr = 0.005, tol = 1e-6, step = 0.5;
  bool unroll = false, quiet = false;
  std::string device = "cpu";
  std::string solver = "broyden", checkpoint = "implicit-et.ckpt", resume, image = "implicit-et.png",
              json, data;
  // What a checkpoint must match besides ConfigKey: the training digits
  // (count and a hash of their pixels), set once they are loaded.
  std::string data_key;
};

// The model options a checkpoint records and must match ("dim=32 heads=8 ...").
std::string ConfigKey(const Config& c);

// The command line into `c`; false when it asked for --help.
bool ParseConfig(int argc, char** argv, Config* c);

}  // namespace implicit_apps
