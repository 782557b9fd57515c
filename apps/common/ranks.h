// The processes an app runs on: under `mpirun -np K` (in a build with MPI) the
// K ranks of MPI_COMM_WORLD, otherwise one process. Only rank 0 talks: on the
// other ranks std::cout and std::cerr are silenced, so that a run prints what
// a single process would (errors reach rank 0 through implicit::FirstError).
#pragma once

#include <implicit/core/communicator.h>
#include <implicit/core/mpi.h>

#include <iostream>
#include <stdexcept>
#include <string>

namespace implicit_apps {

inline const implicit::Communicator& AppCommunicator() {
  static const implicit::Communicator& comm = [] () -> const implicit::Communicator& {
    if (!implicit::mpi::LaunchedByMpirun()) return implicit::SingleProcess();
    std::string why;
    if (!implicit::mpi::Available(&why)) {
      throw std::runtime_error("started by mpirun, but " + why);
    }
    const implicit::Communicator& world = implicit::mpi::World();
    if (!world.is_root()) {
      std::cout.rdbuf(nullptr);  // output is discarded (the stream's badbit is set)
      std::cerr.rdbuf(nullptr);
    }
    return world;
  }();
  return comm;
}

// Runs `work` on every rank; an exception on any rank is rethrown on every
// rank with the message of the lowest failing rank ("rank r: ..."), instead of
// leaving the others waiting in the next collective.
template <typename Work>
void OnEveryRank(const implicit::Communicator& comm, Work&& work) {
  std::string error;
  try {
    work();
  } catch (const std::exception& e) {
    error = comm.size() > 1 ? "rank " + std::to_string(comm.rank()) + ": " + e.what() : e.what();
  }
  error = implicit::FirstError(comm, error);
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace implicit_apps
