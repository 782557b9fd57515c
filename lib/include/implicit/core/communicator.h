/// \file
/// Communicator: the collective operations that spread a batch over processes.
///
/// Per-sample equilibria are independent, so a batch can be split over K
/// processes (ranks): each solves and differentiates its shard, and the ranks
/// then sum parameter gradients, losses and statistics, so that every rank
/// takes the same optimiser step and holds identical parameters. This header
/// is the interface and its single-process implementation (the default; no
/// MPI needed); implicit::mpi::World() (implicit/core/mpi.h, the optional
/// component implicit::mpi) is the one over MPI.
///
/// \code
///   const implicit::Communicator& comm = implicit::mpi::World();    // or SingleProcess()
///   implicit::Shard shard = implicit::ShardOf(batch, comm);          // my columns
///   ... solve and differentiate columns [shard.begin, shard.begin + shard.count) ...
///   implicit::SumOverRanks(comm, gradient);                          // the global batch's gradient
///   optimizer.Step(gradient);                                        // identical on every rank
/// \endcode
///
/// Every collective must be called by all ranks in the same order. Results
/// equal the single-process ones up to the order of summation.
#pragma once

#include <implicit/core/types.h>

#include <string>
#include <vector>

namespace implicit {

/// The collective operations over the ranks that share a batch (the
/// interface; SingleProcessCommunicator and mpi::World() implement it).
///
/// Every collective must be called by all ranks in the same order.
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This process's rank in [0, size()).
  virtual int rank() const = 0;
  /// The number of ranks.
  virtual int size() const = 0;
  ///@{
  /// data[i] <- sum over ranks of data[i] for i < count, on every rank.
  virtual void SumInPlace(double* data, Index count) const = 0;
  virtual void SumInPlace(float* data, Index count) const = 0;
  ///@}
  /// data[i] <- max over ranks of data[i] for i < count, on every rank.
  virtual void MaxInPlace(double* data, Index count) const = 0;
  ///@{
  /// data <- root's data (`count` entries), on every rank (count equal on all ranks).
  virtual void Broadcast(double* data, Index count, int root) const = 0;
  virtual void Broadcast(char* data, Index count, int root) const = 0;
  ///@}
  /// *all <- every rank's `local` (count may differ by rank), in rank order.
  virtual void AllGather(const std::vector<double>& local, std::vector<double>* all) const = 0;

  /// Whether this process is rank 0.
  bool is_root() const { return rank() == 0; }
};

/// One process: every collective is the identity.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void SumInPlace(double*, Index) const override {}
  void SumInPlace(float*, Index) const override {}
  void MaxInPlace(double*, Index) const override {}
  void Broadcast(double*, Index, int) const override {}
  void Broadcast(char*, Index, int) const override {}
  void AllGather(const std::vector<double>& local, std::vector<double>* all) const override {
    *all = local;
  }
};

/// The process-wide single-process communicator.
const Communicator& SingleProcess();

/// The columns [begin, begin + count) of a batch that one rank owns.
struct Shard {
  Index begin = 0;  ///< The first column owned.
  Index count = 0;  ///< The number of columns owned (0: none).
};
///@{
/// The columns [begin, begin + count) of a batch of `batch` samples that `rank`
/// of `size` (or comm's rank of comm's size) owns: contiguous, in rank order,
/// counts differing by at most one (ranks beyond the batch own none).
/// \throws std::invalid_argument unless batch >= 0 and 0 <= rank < size.
Shard ShardOf(Index batch, int rank, int size);
inline Shard ShardOf(Index batch, const Communicator& comm) {
  return ShardOf(batch, comm.rank(), comm.size());
}
///@}

/// Sums a contiguous Eigen object (gradient, loss, counters) over the ranks in place.
template <typename Derived>
void SumOverRanks(const Communicator& comm, Eigen::PlainObjectBase<Derived>& values) {
  comm.SumInPlace(values.data(), values.size());
}
/// Returns the sum of `value` over the ranks.
inline double SumOverRanks(const Communicator& comm, double value) {
  comm.SumInPlace(&value, 1);
  return value;
}

/// The first error of any rank, in rank order, on every rank ("" when no rank
/// reports one).
///
/// Collective: a rank that failed (bad input, an exception) calls
/// it with its message, the others with "", and then all of them can stop
/// together with the same message instead of waiting in the next collective.
std::string FirstError(const Communicator& comm, const std::string& local_error);

}  // namespace implicit
