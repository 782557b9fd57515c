// Must not compile: the functor's operator() is not a template on the scalar
// type, so AutoDiffEnergy cannot call it with dual numbers or tape variables.
// core_compile_errors (test/core/compile_errors.cmake) requires one short error
// naming the rule:
// expect: must be a template on the scalar type T
#include <implicit/core/autodiff_energy.h>

struct NotATemplate {
  double operator()(const implicit::Vector<double>& x, const implicit::Vector<double>&) const {
    return 0.5 * x.squaredNorm();
  }
};

int main() {
  implicit::AutoDiffEnergy<NotATemplate, double> energy(NotATemplate{}, 3);
  return static_cast<int>(energy.dimension());
}
