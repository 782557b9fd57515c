/// \file
/// internal::ParallelFor: the library's loop on Eigen's threads. The energies'
/// column passes and column blocks, the Energy Transformer's samples and the
/// solvers' per-sample updates all run through it: body(i, thread) for every
/// i in [0, count), in one OpenMP parallel region on up to `threads` threads
/// (a static schedule; thread in [0, threads) names the thread, for
/// per-thread scratch), or on the calling thread as thread 0 when threads <= 1,
/// count < 2, inside a caller's own parallel region (a softmax called from
/// the Energy Transformer's columns) or without OpenMP. A region is entered
/// only for several threads: even one with a false `if` clause is a call into
/// the OpenMP runtime, and the small evaluations make many such loops. Each
/// index runs the same code whatever the thread count, so a body that writes
/// only its own outputs gives the same bits on any number of threads. A body
/// that throws does not stop the loop: the first exception (the lowest index's
/// on one thread) is rethrown once every index has run, on any thread count.
///
/// \code
///   std::vector<Work> work(threads);                 // one per thread
///   implicit::internal::ParallelFor(B, threads, [&](Index b, int thread) {
///     Column(x.col(b), &work[thread]);              // writes column b only
///   });
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <algorithm>
#include <exception>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace implicit {
namespace internal {

/// body(i, thread) for every i in [0, count) (see the file comment).
/// \throws the first exception a body throws, once every index has run.
template <typename Body>
void ParallelFor(Index count, int threads, const Body& body) {
  std::exception_ptr failure;
#ifdef _OPENMP
  threads = static_cast<int>(std::min<Index>(threads, count));
  if (threads > 1 && !omp_in_parallel()) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index i = 0; i < count; ++i) {
      try {
        body(i, omp_get_thread_num());
      } catch (...) {
#pragma omp critical(implicit_parallel_for)
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
    return;
  }
#else
  (void)threads;
#endif
  for (Index i = 0; i < count; ++i) {
    try {
      body(i, 0);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace internal
}  // namespace implicit
