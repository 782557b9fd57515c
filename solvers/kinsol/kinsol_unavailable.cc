// implicit::kinsol in a build without SUNDIALS KINSOL (IMPLICIT_WITH_KINSOL=OFF):
// the API exists, Available() says why nothing runs.
#include <implicit/solvers/kinsol.h>

#include <stdexcept>
#include <string>

namespace implicit {
namespace kinsol {
namespace {
const char* const kWhy =
    "libimplicit was built without SUNDIALS KINSOL (IMPLICIT_WITH_KINSOL=OFF; apt-get install libsundials-dev "
    "and reconfigure)";
}  // namespace

bool Available(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}
std::string Version() { return ""; }
void RegisterSolvers() {}

template <typename Scalar>
Summary KinsolSolver<Scalar>::Solve(const FixedPointMap<Scalar>&, MatrixRef<Scalar>) const {
  throw std::runtime_error(name() + ": " + kWhy);
}

template class KinsolSolver<float>;
template class KinsolSolver<double>;

}  // namespace kinsol
}  // namespace implicit
