// The buffers a solver object keeps between its solves
// (solvers/internal/buffer_stash.h): a later solve of the same sizes gets the
// same storage back (no allocation), and what is kept after a solve is exactly
// what that solve used, so solves of varying batch sizes do not pile up memory.
#define BOOST_TEST_MODULE buffer_stash
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/internal/buffer_stash.h>

#include <algorithm>
#include <utility>
#include <vector>

using namespace implicit;
using internal::BufferPool;
using internal::SolveBuffers;

namespace {

// One "solve": takes matrices of the given shapes (rows x cols each) and
// returns their data pointers.
std::vector<const double*> Solve(BufferPool<double>& pool, const std::vector<std::pair<Index, Index>>& shapes) {
  SolveBuffers<double> buffers(pool);
  std::vector<const double*> data;
  for (const auto& [rows, cols] : shapes) {
    Matrix<double>& m = buffers.Take(rows, cols);
    BOOST_TEST(m.rows() == rows);
    BOOST_TEST(m.cols() == cols);
    m.setConstant(1.0);  // written before the next solve reads it back
    data.push_back(m.data());
  }
  return data;
}

Index Held(BufferPool<double>& pool) {
  auto stash = pool.Acquire();
  return stash->numbers();
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_solve_of_the_same_sizes_gets_the_same_storage) {
  BufferPool<double> pool;
  const std::vector<std::pair<Index, Index>> shapes = {{8, 5}, {8, 5}, {8, 15}, {8, 5}};
  const std::vector<const double*> first = Solve(pool, shapes);
  BOOST_TEST(Held(pool) == 3 * 40 + 120);
  const std::vector<const double*> second = Solve(pool, shapes);
  // Every buffer of the second solve is one of the first's (same-sized
  // buffers may change places), and no two coincide.
  for (std::size_t i = 0; i < second.size(); ++i) {
    BOOST_TEST(std::count(first.begin(), first.end(), second[i]) == 1);
    BOOST_TEST(std::count(second.begin(), second.end(), second[i]) == 1);
  }
  // A different shape of the same size reuses a buffer too.
  const std::vector<const double*> reshaped = Solve(pool, {{5, 8}, {40, 1}, {8, 5}, {4, 30}});
  for (const double* p : reshaped) BOOST_TEST(std::count(first.begin(), first.end(), p) == 1);
}

BOOST_AUTO_TEST_CASE(only_the_last_solves_buffers_are_kept) {
  BufferPool<double> pool;
  Solve(pool, {{8, 5}, {8, 5}, {8, 15}});
  BOOST_TEST(Held(pool) == 80 + 120);
  Solve(pool, {{8, 6}, {8, 6}, {8, 18}});  // another batch size: the old buffers are freed
  BOOST_TEST(Held(pool) == 96 + 144);
  Solve(pool, {{8, 6}});
  BOOST_TEST(Held(pool) == 48);
}

BOOST_AUTO_TEST_CASE(concurrent_solves_get_different_stashes) {
  BufferPool<double> pool;
  Solve(pool, {{8, 5}});
  SolveBuffers<double> outer(pool);
  Matrix<double>& a = outer.Take(8, 5);  // the kept buffer
  {
    SolveBuffers<double> inner(pool);  // a second caller: a new, empty stash
    Matrix<double>& b = inner.Take(8, 5);
    BOOST_TEST(b.data() != a.data());
  }
  BOOST_TEST(pool.available() == 1u);  // the inner stash is back
}
