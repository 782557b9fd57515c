// Links the optional MPI component (find_package(implicit COMPONENTS mpi),
// implicit::mpi), splits a batch of 10 samples over the ranks and checks that
// the ranks' shard sizes add up to it; prints from rank 0 only.
#include <implicit/core/communicator.h>
#include <implicit/core/mpi.h>

#include <iostream>
#include <string>

int main() {
  std::string reason;
  const bool with_mpi = implicit::mpi::Available(&reason);
  const implicit::Communicator& comm =
      with_mpi ? implicit::mpi::World() : implicit::SingleProcess();
  const double total = implicit::SumOverRanks(comm, double(implicit::ShardOf(10, comm).count));
  if (comm.is_root()) {
    std::cout << "implicit::mpi: " << (with_mpi ? "MPI" : "no MPI (" + reason + ")") << ", "
              << comm.size() << " rank(s), shards cover " << total << " of 10 samples\n";
  }
  return total == 10.0 ? 0 : 1;
}
