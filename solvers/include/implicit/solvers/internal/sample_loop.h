// The per-sample work of the batched solvers shared among threads (internal).
//
// Anderson and Broyden update each active sample's history and proposal
// between two batch evaluations: a loop over samples whose iterations touch
// only their own columns and per-sample entries. Run one thread at a time,
// it was the part of an iteration that did not scale: with 2 threads on
// hopfield-digits a tenth of the time was a thread waiting for it. Shared
// among the threads Eigen may use (Eigen::setNbThreads, the same setting the
// maps' products follow), each sample's computation is the same as on one
// thread, so results do not depend on the thread count.
//
//   SampleLoop loop(n);                          // n: the state's dimension
//   Matrix<Scalar> scratch(n, loop.threads());   // one column per thread
//   loop.Run(monitor.active_columns(), [&](Index b, int thread) {
//     auto work = scratch.col(thread);           // this thread's own
//     ...                                        // sample b's update
//   });
//
// The body must touch shared state only through entries of its own sample b
// (core/parallel_for.h: the loop, and what happens to an exception).
#pragma once

#include <implicit/core/parallel_for.h>
#include <implicit/core/types.h>

#include <Eigen/Core>

#include <algorithm>
#include <vector>

namespace implicit {
namespace internal {

class SampleLoop {
 public:
  // n: the dimension of a sample (the work of one iteration of the loop is
  // about a small multiple of n numbers).
  explicit SampleLoop(Index n) : n_(n), threads_(std::max(1, Eigen::nbThreads())) {}

  // The most threads Run uses: scratch sized by it has a column for each.
  int threads() const { return threads_; }

  // body(b, thread) for every b in `columns`, thread in [0, threads()).
  template <typename Body>
  void Run(const std::vector<Index>& columns, const Body& body) const {
    const Index count = static_cast<Index>(columns.size());
    ParallelFor(count, ThreadsFor(count), [&](Index j, int thread) { body(columns[j], thread); });
  }

 private:
  // Below about 2^14 numbers of work a parallel region costs more than it saves.
  int ThreadsFor(Index count) const {
    if (threads_ == 1 || count < 2 || n_ * count < (Index(1) << 14)) return 1;
    return static_cast<int>(std::min<Index>(threads_, count));
  }

  Index n_;
  int threads_;
};

}  // namespace internal
}  // namespace implicit
