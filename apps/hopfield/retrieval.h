// implicit-hopfield retrieval: the first --patterns digits stored, each queried
// with its bottom half zeroed; hit rates after one update and after a solve to
// convergence, on the CPU or (--device cuda) on the GPU.
#pragma once

#include "hopfield/shared.h"

#include <CLI/CLI.hpp>

#include <string>

namespace implicit_apps {

struct RetrievalSettings {
  long patterns = 100;
  double beta = 4.0;
  std::string device = "cpu";
  SolveSettings solve;
};

// The subcommand "retrieval" of `app`, its options filling `r`.
CLI::App* AddRetrieval(CLI::App& app, RetrievalSettings* r);

int Retrieval(const RetrievalSettings& r, const Common& c);

}  // namespace implicit_apps
