// Links the optional GPU component (find_package(implicit COMPONENTS cuda),
// implicit::cuda) and reports whether a GPU can be used; exits 0 either way.
// With a CUDA build it also compiles against the installed device headers and
// builds a device solver by name (no device needed for that).
#include <implicit/core/cuda.h>
#ifdef IMPLICIT_WITH_CUDA
#include <implicit/core/cuda_hopfield.h>
#include <implicit/diff/cuda_backward.h>
#include <implicit/solvers/cuda_solvers.h>
#endif

#include <iostream>
#include <string>

int main() {
  std::string reason;
  if (implicit::cuda::Available(&reason)) {
    std::cout << "implicit::cuda: " << implicit::cuda::DeviceCount() << " CUDA device(s)\n";
  } else {
    std::cout << "implicit::cuda: no GPU: " << reason << "\n";
  }
#ifdef IMPLICIT_WITH_CUDA
  auto solver = implicit::cuda::MakeDeviceSolver<double>("anderson", {{"memory", "5"}});
  std::cout << "implicit::cuda: device solver " << solver->name() << "\n";
#endif
  return 0;
}
