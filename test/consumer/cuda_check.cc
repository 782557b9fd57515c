// Links the optional GPU component (find_package(implicit COMPONENTS cuda),
// implicit::cuda) and reports whether a GPU can be used; exits 0 either way.
#include <implicit/core/cuda.h>

#include <iostream>
#include <string>

int main() {
  std::string reason;
  if (implicit::cuda::Available(&reason)) {
    std::cout << "implicit::cuda: " << implicit::cuda::DeviceCount() << " CUDA device(s)\n";
  } else {
    std::cout << "implicit::cuda: no GPU: " << reason << "\n";
  }
  return 0;
}
