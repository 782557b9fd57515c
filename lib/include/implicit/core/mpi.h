/// \file
/// The MPI backend of Communicator (communicator.h): all processes started by
/// `mpirun -np K program ...` as ranks 0..K-1 of MPI_COMM_WORLD.
///
/// Part of the optional component implicit::mpi (CMake option IMPLICIT_WITH_MPI,
/// on when Debian's libopenmpi-dev is found; find_package(implicit COMPONENTS
/// mpi)). A build without MPI still has this header: Available() then returns
/// false with the reason and World() throws std::runtime_error. Nothing else in
/// the library depends on MPI.
///
/// \code
///   std::string why;
///   const implicit::Communicator& comm =
///       implicit::mpi::Available(&why) ? implicit::mpi::World() : implicit::SingleProcess();
///   if (comm.is_root()) std::cout << "ranks: " << comm.size() << "\n";
/// \endcode
///
/// World() initialises MPI on first use (MPI_THREAD_FUNNELED: only the thread
/// that calls the collectives talks to MPI) and finalises it at exit, unless the
/// program initialised MPI itself. Run under mpirun; started directly, the
/// program is one rank of one.
#pragma once

#include <implicit/core/communicator.h>

#include <cstdlib>
#include <string>

namespace implicit {
namespace mpi {

/// True when the library was built with MPI; otherwise false with the reason
/// in *reason (when not null).
bool Available(std::string* reason = nullptr);

/// MPI_COMM_WORLD as a Communicator (initialising MPI on first use).
/// \throws std::runtime_error without MPI, or when initialising MPI fails.
const Communicator& World();

/// True when this process was started by mpirun / mpiexec (the launchers of
/// Open MPI, MPICH and PMIx set these variables).
///
/// Programs that run either way use World() only then, so that a plain start
/// never initialises MPI.
inline bool LaunchedByMpirun() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

}  // namespace mpi
}  // namespace implicit
