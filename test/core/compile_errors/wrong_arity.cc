// Must not compile: the functor takes x alone, where AutoDiffEnergy calls it
// as (x, theta), or (x, c, theta) with an input.
// core_compile_errors (test/core/compile_errors.cmake) requires one short error
// naming the rule:
// expect: the functor must be callable as
#include <implicit/core/autodiff_energy.h>

struct XAlone {
  template <typename T>
  T operator()(const implicit::Vector<T>& x) const {
    return T(0.5) * x.squaredNorm();
  }
};

int main() {
  implicit::AutoDiffEnergy<XAlone, double> energy(XAlone{}, 3);
  return static_cast<int>(energy.dimension());
}
