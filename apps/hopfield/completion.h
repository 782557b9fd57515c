// implicit-hopfield completion: digits 0..999 as memories complete the hidden
// bottom half of the others in one attention step; the MSE against the
// mean-fill baseline.
#pragma once

#include "hopfield/shared.h"

#include <CLI/CLI.hpp>

namespace implicit_apps {

// The subcommand "completion" of `app`, its --beta into `beta`.
CLI::App* AddCompletion(CLI::App& app, double* beta);

int Completion(double beta, const Common& c);

}  // namespace implicit_apps
