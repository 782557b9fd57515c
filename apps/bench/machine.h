// What implicit-bench reports of the machine and the build it measures on:
// cores, CPU model, compiler, Eigen, the project's build flags and the CPU
// kernel levels, printed (PrintMachine) and in the JSON (MachineJson).
#pragma once

#include "common/json_output.h"

namespace implicit_apps {

// The "machine: ...", "build: ..." and "kernels: ..." lines.
void PrintMachine();

// Sets (*root)["machine"] and (*root)["build"].
void MachineJson(Json* root);

}  // namespace implicit_apps
