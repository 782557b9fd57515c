// implicit::petsc in a build without PETSc (IMPLICIT_WITH_PETSC=OFF):
// the API exists, Available() says why nothing runs.
#include <implicit/solvers/petsc.h>

#include <stdexcept>
#include <string>

namespace implicit {
namespace petsc {
namespace {
const char* const kWhy =
    "libimplicit was built without PETSc (IMPLICIT_WITH_PETSC=OFF; apt-get install petsc-dev "
    "and reconfigure)";
}  // namespace

bool Available(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}
std::string Version() { return ""; }
void RegisterSolvers() {}

template <typename Scalar>
Summary PetscSolver<Scalar>::Solve(const FixedPointMap<Scalar>&, MatrixRef<Scalar>) const {
  throw std::runtime_error(name() + ": " + kWhy);
}

template class PetscSolver<float>;
template class PetscSolver<double>;

}  // namespace petsc
}  // namespace implicit
