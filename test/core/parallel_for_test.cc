// internal::ParallelFor (parallel_for.h), the loop every threaded pass of the
// library runs through: each index runs exactly once, on a thread named in
// [0, threads); one index's exception is rethrown after every other index has
// run; inside a caller's parallel region, and for threads <= 1 or one index,
// the loop runs on the calling thread as thread 0.
#define BOOST_TEST_MODULE parallel_for
#include <boost/test/unit_test.hpp>

#include <implicit/core/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <stdexcept>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

using implicit::Index;
using implicit::internal::ParallelFor;

BOOST_AUTO_TEST_CASE(every_index_runs_once_on_a_named_thread) {
  // At most 3 threads, as in the other threaded tests: with 5 or 8 (on the
  // 2-core CI machine) LeakSanitizer reported libomp's own per-thread
  // allocations as leaks in the sanitizer build.
  for (const int threads : {0, 1, 2, 3}) {
    for (const Index count : {Index(0), Index(1), Index(2), Index(7), Index(100)}) {
      std::vector<int> runs(static_cast<std::size_t>(count), 0), thread_of(static_cast<std::size_t>(count), -1);
      ParallelFor(count, threads, [&](Index i, int thread) {
        ++runs[static_cast<std::size_t>(i)];
        thread_of[static_cast<std::size_t>(i)] = thread;
      });
      for (Index i = 0; i < count; ++i) {
        BOOST_TEST(runs[static_cast<std::size_t>(i)] == 1);
        const int t = thread_of[static_cast<std::size_t>(i)];
        BOOST_TEST((t >= 0 && t < std::max(1, threads)), "index " << i << " on thread " << t);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(an_exception_is_rethrown_after_every_index_has_run) {
  for (const int threads : {1, 3}) {
    std::atomic<int> ran{0};
    BOOST_CHECK_THROW(ParallelFor(50, threads,
                                  [&](Index i, int) {
                                    ++ran;
                                    if (i == 7 || i == 31) throw std::runtime_error("index failed");
                                  }),
                      std::runtime_error);
    BOOST_TEST(ran.load() == 50);
  }
}

#ifdef _OPENMP
BOOST_AUTO_TEST_CASE(inside_a_parallel_region_the_loop_stays_on_the_calling_thread) {
  std::vector<int> outer_threads(2, -1);
  std::vector<std::set<int>> inner(2);
  std::vector<int> inner_in_parallel(2, 0);
#pragma omp parallel num_threads(2)
  {
    const int outer = omp_get_thread_num();
    outer_threads[static_cast<std::size_t>(outer)] = outer;
    ParallelFor(20, 4, [&](Index, int thread) {
      inner[static_cast<std::size_t>(outer)].insert(thread);
      if (omp_get_thread_num() == outer) ++inner_in_parallel[static_cast<std::size_t>(outer)];
    });
  }
  for (std::size_t t = 0; t < 2; ++t) {
    if (outer_threads[t] < 0) continue;  // the runtime gave the region one thread
    BOOST_TEST((inner[t] == std::set<int>{0}));
    BOOST_TEST(inner_in_parallel[t] == 20);
  }
}
#endif
