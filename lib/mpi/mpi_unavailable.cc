// implicit::mpi without MPI: says why, and World() refuses.
#include <implicit/core/mpi.h>

#include <stdexcept>

namespace implicit {
namespace mpi {

namespace {
const char* const kReason =
    "libimplicit was built without MPI (IMPLICIT_WITH_MPI=OFF or libopenmpi-dev not found)";
}

bool Available(std::string* reason) {
  if (reason != nullptr) *reason = kReason;
  return false;
}

const Communicator& World() { throw std::runtime_error(std::string("mpi::World(): ") + kReason); }

}  // namespace mpi
}  // namespace implicit
