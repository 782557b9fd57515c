// The single-process communicator and the collective helpers of communicator.h.
#include <implicit/core/communicator.h>

#include <algorithm>
#include <stdexcept>

namespace implicit {

const Communicator& SingleProcess() {
  static const SingleProcessCommunicator instance;
  return instance;
}

Shard ShardOf(Index batch, int rank, int size) {
  if (batch < 0 || size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument("ShardOf: need batch >= 0 and 0 <= rank < size, got batch " +
                                std::to_string(batch) + ", rank " + std::to_string(rank) +
                                ", size " + std::to_string(size));
  }
  const Index base = batch / size;
  const Index extra = batch % size;  // the first `extra` ranks own one more
  Shard shard;
  shard.count = base + (rank < extra ? 1 : 0);
  shard.begin = rank * base + std::min<Index>(rank, extra);
  return shard;
}

std::string FirstError(const Communicator& comm, const std::string& local_error) {
  // The lowest failing rank (as -rank, so that the max finds it), then its message.
  double failing = local_error.empty() ? -double(comm.size()) : -double(comm.rank());
  comm.MaxInPlace(&failing, 1);
  if (failing == -double(comm.size())) return "";
  const int root = static_cast<int>(-failing);
  double length = comm.rank() == root ? double(local_error.size()) : 0.0;
  comm.Broadcast(&length, 1, root);
  std::string message(static_cast<size_t>(length), '\0');
  if (comm.rank() == root) message = local_error;
  comm.Broadcast(message.data(), Index(message.size()), root);
  return message;
}

}  // namespace implicit
