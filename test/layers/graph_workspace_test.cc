// Workspaces kept between calls (implicit/core/workspace_pool.h) and the graph
// Energy Transformer that uses them: a pool lends different workspaces to
// callers that hold them at the same time and reuses given-back ones; after a
// first call, the graph ET's hot paths (E and dE/dg, the gradient and its
// Hessian-vector product, the map's Jacobian products both ways, the
// parameter product) make no heap allocation of a workspace's size (>= 1 kB)
// on the same graph; and calls from several threads at once give the results
// of one thread.
//
// Heap allocations are counted by defining malloc in this program (glibc lets
// a program replace it; this one forwards to __libc_malloc). Under
// AddressSanitizer, which owns malloc, the count is skipped with a message.
#define BOOST_TEST_MODULE graph_workspace
#include <boost/test/unit_test.hpp>

#include <implicit/core/workspace_pool.h>
#include <implicit/layers/graph_energy_transformer.h>

#include "support/test_problems.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define IMPLICIT_COUNTS_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IMPLICIT_COUNTS_MALLOC 0
#endif
#endif
#ifndef IMPLICIT_COUNTS_MALLOC
#define IMPLICIT_COUNTS_MALLOC 1
#endif

namespace {
std::atomic<bool> counting{false};
std::atomic<long> large_allocations{0};
}  // namespace

#if IMPLICIT_COUNTS_MALLOC
namespace {
constexpr std::size_t kWorkspaceBytes = 1024;
}  // namespace
extern "C" void* __libc_malloc(std::size_t size);
extern "C" void* malloc(std::size_t size) {
  if (size >= kWorkspaceBytes && counting.load(std::memory_order_relaxed))
    large_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
#endif

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::RandomMatrix;

namespace {

struct Csr {
  std::vector<Index> offsets, neighbors;
};

// A ring of n nodes with chords i -> i + 3 (both directions).
Csr RingWithChords(Index n) {
  Csr g{{0}, {}};
  for (Index i = 0; i < n; ++i) {
    std::vector<Index> l = {(i + n - 3) % n, (i + n - 1) % n, (i + 1) % n, (i + 3) % n};
    std::sort(l.begin(), l.end());
    g.neighbors.insert(g.neighbors.end(), l.begin(), l.end());
    g.offsets.push_back(static_cast<Index>(g.neighbors.size()));
  }
  return g;
}

struct GraphEt {
  Csr graph;
  implicit::GraphEnergyTransformer<double> et;
  Matrix<double> x, v;
  explicit GraphEt(Index n) : graph(RingWithChords(n)), et(Options(), graph.offsets, graph.neighbors) {
    et.Initialize(1, 0.3);
    et.SetInput(RandomMatrix<double>(et.dimension(), 2, 2));
    x = RandomMatrix<double>(et.dimension(), 2, 3);
    v = RandomMatrix<double>(et.dimension(), 2, 4);
  }
  static implicit::GraphEnergyTransformerOptions Options() {
    implicit::GraphEnergyTransformerOptions o;
    o.node_dim = 6;
    o.num_heads = 2;
    o.head_dim = 3;
    o.num_memories = 5;
    return o;
  }
  // Every hot path once; the results in one vector.
  Vector<double> Evaluate() const {
    const implicit::GraphEnergyTransformerMap<double> map(const_cast<implicit::GraphEnergyTransformer<double>&>(et),
                                                          0.5);
    const Index n = x.rows(), B = x.cols();
    Matrix<double> out(n, 7 * B);
    Vector<double> values(2 * B), grad(et.num_parameters());
    implicit::VectorRef<double> energies = values.head(B);
    et.DescentDirectionAndValue(x, out.middleCols(0, B), energies);
    et.GradientAndValue(x, out.middleCols(B, B), values.tail(B));
    et.HessianVectorProduct(x, v, out.middleCols(2 * B, B));
    map.JacobianVectorProduct(x, v, out.middleCols(3 * B, B));
    map.VectorJacobianProduct(x, v, out.middleCols(4 * B, B));
    map.InputVectorJacobianProduct(x, v, out.middleCols(5 * B, B));
    map.Evaluate(x, out.middleCols(6 * B, B));
    map.ParameterVectorJacobianProduct(x, v, grad);
    Vector<double> all(out.size() + values.size() + grad.size());
    all << Eigen::Map<const Vector<double>>(out.data(), out.size()), values, grad;
    return all;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(pool_lends_distinct_workspaces_and_reuses_them) {
  implicit::WorkspacePool<std::vector<int>> pool;
  std::vector<int>* first = nullptr;
  {
    auto a = pool.Acquire();
    auto b = pool.Acquire();
    BOOST_TEST(a.get() != b.get());
    first = a.get();
    BOOST_TEST(pool.available() == 0u);
  }
  BOOST_TEST(pool.available() == 2u);
  auto c = pool.Acquire();
  BOOST_TEST((c.get() == first || pool.available() == 1u));
  const implicit::WorkspacePool<std::vector<int>> copy = pool;  // a copy starts empty
  BOOST_TEST(copy.available() == 0u);
}

BOOST_AUTO_TEST_CASE(graph_et_hot_paths_reuse_their_workspaces) {
  const GraphEt g(40);
  const Vector<double> first = g.Evaluate();  // sizes the workspaces
  if (!IMPLICIT_COUNTS_MALLOC) {
    BOOST_TEST_MESSAGE("built with AddressSanitizer, which owns malloc: allocations not counted");
    return;
  }
  large_allocations = 0;
  counting = true;
  const Vector<double> again = g.Evaluate();
  counting = false;
  // Evaluate's own result matrices (3 of them) are the only large allocations left.
  BOOST_TEST(large_allocations.load() <= 3);
  BOOST_TEST((again - first).norm() == 0.0);
}

BOOST_AUTO_TEST_CASE(concurrent_calls_give_the_results_of_one_thread) {
  const GraphEt g(40);
  const Vector<double> expected = g.Evaluate();
  std::vector<Vector<double>> results(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 5; ++k) results[t] = g.Evaluate();
    });
  for (std::thread& t : threads) t.join();
  for (const Vector<double>& r : results) BOOST_TEST((r - expected).norm() == 0.0);
}
