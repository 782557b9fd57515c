// implicit-hopfield capacity: random +-1 patterns retrieved from noisy probes
// by binary dynamics; retrieval rate against the number of stored patterns for
// the quadratic, polynomial and exponential energies.
#pragma once

#include "hopfield/shared.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace implicit_apps {

struct CapacitySettings {
  long dimension = 64, probes = 50, degree = 3, seed = 1;
  double flip = 0.1;
  std::vector<std::string> counts = {"4", "8", "16", "32", "64", "128", "256", "512"};
};

// The subcommand "capacity" of `app`, its options filling `s`.
CLI::App* AddCapacity(CLI::App& app, CapacitySettings* s);

int Capacity(const CapacitySettings& s, const Common& c);

}  // namespace implicit_apps
