// implicit-hopfield sparse: support size of the attention weights (softmax,
// entmax15, sparsemax) at the fixed point of the digits retrieval, across beta.
#pragma once

#include "hopfield/shared.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace implicit_apps {

struct SparseSettings {
  long patterns = 100;
  std::vector<std::string> betas = {"0.01", "0.03", "0.1", "0.3", "1", "3"};
  SolveSettings solve;
};

// The subcommand "sparse" of `app`, its options filling `s`.
CLI::App* AddSparse(CLI::App& app, SparseSettings* s);

int Sparse(const SparseSettings& s, const Common& c);

}  // namespace implicit_apps
