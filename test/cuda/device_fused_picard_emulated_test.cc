// The fused Picard kernels (solvers/src/cuda/fused_picard_kernels.cuh: the grid kernel
// and the thread-block cluster kernel) run on the CPU under the fiber
// emulation of the CUDA execution model (support/cuda_emulation.h), against
// the CPU Picard solver on the same Hopfield CCCP map: the same status for
// every sample, iteration counts within one, the same returned iterate (the
// kept, lowest-energy one for a sample that did not converge). This checks
// the kernels' logic (indexing, the active lists, the cluster's sample queue,
// sub-chunks, the merges, the device port of the monitor's rules) where no
// GPU exists; timing, memory ordering and races need the GPU tests
// (device_backend_test.cc) and compute-sanitizer.
#define BOOST_TEST_MODULE cuda_fused_picard_emulated
#include <boost/test/unit_test.hpp>

#include <implicit/core/energy_maps.h>
#include <implicit/layers/modern_hopfield_energy.h>
#include <implicit/solvers/internal/fused_rules.h>
#include <implicit/solvers/picard.h>

#include "support/test_problems.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

// After every other header: it defines CUDA's names as macros.
#include "support/cuda_emulation.h"

#include "../../solvers/src/cuda/fused_picard_kernels.cuh"

namespace {

using namespace implicit;
using implicit::internal::FusedRules;
namespace k = implicit::cuda::internal;

struct Problem {
  Matrix<double> patterns, queries;
  double beta = 4.0;
};
// N random patterns of norm about 1, queries near the first B of them (one
// with a NaN when asked).
Problem MakeProblem(Index n, Index N, Index B, unsigned seed) {
  Problem p;
  p.patterns = testing::RandomMatrix<double>(n, N, seed, 1.0 / std::sqrt(double(n)));
  p.queries = p.patterns.leftCols(B) + testing::RandomMatrix<double>(n, B, seed + 1, 0.3 / std::sqrt(double(n)));
  return p;
}

// A kernel's solve: the returned iterates and, per sample, FusedStop,
// iterations, residual and relative residual.
template <typename S>
struct Outcome {
  Matrix<S> z;
  std::vector<double> results;
};

// The kernels' workspace: 8-byte words, the carving's 256-byte alignment
// relative to its start.
std::vector<std::uint64_t> Workspace(std::size_t bytes) { return std::vector<std::uint64_t>(bytes / 8 + 1, 0); }

// The grid kernel with `chunks` pattern chunks and `groups` sample groups;
// seed: the emulation's resume order (0: thread order, else shuffled).
template <typename S, int R>
Outcome<S> EmulateGrid(const Problem& p, const k::FusedPicardRules& rules, int chunks, int groups, unsigned seed) {
  const int n = static_cast<int>(p.patterns.rows()), N = static_cast<int>(p.patterns.cols());
  const int B = static_cast<int>(p.queries.cols());
  const Matrix<S> X = p.patterns.cast<S>();
  Outcome<S> out{p.queries.cast<S>(), std::vector<double>(4 * static_cast<std::size_t>(B), std::nan(""))};
  k::FusedArgs<S> a{};
  k::SetCommon<S>(&a, X.data(), n, N, static_cast<S>(p.beta), out.z.data(), B, rules, out.results.data());
  a.chunk = (N + chunks - 1) / chunks;
  a.chunks = (N + a.chunk - 1) / a.chunk;
  a.groups = groups;
  const int blocks = a.chunks * groups;
  std::vector<std::uint64_t> workspace = Workspace(k::Carve<S>(nullptr, n, B, a.chunks, blocks, &a));
  k::Carve<S>(reinterpret_cast<unsigned char*>(workspace.data()), n, B, a.chunks, blocks, &a);
  implicit_emulation::Run(blocks, k::kFusedThreads, 1, k::GridSharedBytes(n, a.chunk, sizeof(S)),
                          [&] { k::FusedPicardKernel<S, R>(a); }, seed);
  return out;
}

// The cluster kernel with `clusters` clusters of `cluster` blocks, each
// keeping `slots` samples in flight, phase A on the tensor cores (double) or
// not; seed as above.
// probe: the phase probe's record (its size: the capacity), or nullptr.
template <typename S, int R>
Outcome<S> EmulateClusters(const Problem& p, const k::FusedPicardRules& rules, int cluster, int clusters, int slots,
                           unsigned seed, bool tensor_cores = true, std::vector<long long>* probe = nullptr) {
  const int n = static_cast<int>(p.patterns.rows()), N = static_cast<int>(p.patterns.cols());
  const int B = static_cast<int>(p.queries.cols());
  const Matrix<S> X = p.patterns.cast<S>();
  Outcome<S> out{p.queries.cast<S>(), std::vector<double>(4 * static_cast<std::size_t>(B), std::nan(""))};
  k::ClusterArgs<S> a{};
  k::SetCommon<S>(&a, X.data(), n, N, static_cast<S>(p.beta), out.z.data(), B, rules, out.results.data());
  a.cluster = cluster;
  a.chunk = (N + cluster - 1) / cluster;
  a.slots = slots;
  a.tensor_cores = tensor_cores;
  a.probe = probe != nullptr ? probe->data() : nullptr;
  a.probe_iterations = probe != nullptr ? static_cast<int>(probe->size() / k::kProbeFields) : 0;
  std::vector<std::uint64_t> workspace = Workspace(k::Carve<S>(nullptr, n, B, &a));
  k::Carve<S>(reinterpret_cast<unsigned char*>(workspace.data()), n, B, &a);
  *a.queue = 0;
  implicit_emulation::Run(cluster * clusters, k::kFusedThreads, cluster, k::ClusterSharedBytes(n, a.chunk, sizeof(S)),
                          [&] { k::ClusterPicardKernel<S, R>(a); }, seed);
  return out;
}

std::string StatusName(double stop) {
  switch (static_cast<int>(stop)) {
    case k::kFusedConverged: return TerminationTypeToString(TerminationType::kConverged);
    case k::kFusedDiverged: return TerminationTypeToString(TerminationType::kDiverged);
    case k::kFusedStalled: return TerminationTypeToString(TerminationType::kStalled);
    case k::kFusedNonFinite: return TerminationTypeToString(TerminationType::kNonFinite);
    case k::kFusedMaxIterations: return TerminationTypeToString(TerminationType::kMaxIterations);
    default: return "no status (" + std::to_string(stop) + ")";
  }
}

// The kernel's outcome against the CPU Picard solver on the same problem.
template <typename S>
void CheckAgainstCpu(const Problem& p, const typename PicardSolver<S>::Options& o, const Outcome<S>& kernel,
                     double agree) {
  typename ModernHopfieldEnergy<S>::Options eo;
  eo.beta = static_cast<S>(p.beta);
  eo.learn_beta = false;
  const ModernHopfieldEnergy<S> energy(p.patterns.cast<S>(), eo);
  const CccpMap<S> map(energy);
  Matrix<S> z = p.queries.cast<S>();
  const Summary cpu = PicardSolver<S>(o).Solve(map, z);
  for (Index b = 0; b < p.queries.cols(); ++b) {
    BOOST_TEST_CONTEXT("sample " << b) {
      const double* r = kernel.results.data() + 4 * b;
      BOOST_TEST(StatusName(r[0]) == TerminationTypeToString(cpu.sample_status[b]));
      BOOST_TEST(std::abs(r[1] - cpu.sample_iterations[b]) <= 1);
      if (cpu.sample_status[b] == TerminationType::kNonFinite) continue;
      const double scale = 1 + z.col(b).template cast<double>().norm();
      BOOST_TEST((kernel.z.col(b) - z.col(b)).template cast<double>().norm() <= agree * scale);
      BOOST_TEST(std::abs(r[2] - cpu.sample_residual[b]) <= agree * scale);
    }
  }
}

// The cases both kernels are held to, each kernel shape given by `run`.
template <typename Run>
void CheckCases(Run run) {
  PicardSolver<double>::Options o;
  o.absolute_tolerance = 1e-10;
  o.max_iterations = 300;
  const Problem p = MakeProblem(20, 90, 24, 31);
  BOOST_TEST_CONTEXT("converged, double, one coordinate per lane") {
    CheckAgainstCpu<double>(p, o, run(p, o, double(), std::integral_constant<int, 1>()), 1e-9);
  }
  Problem poisoned = p;
  poisoned.queries(3, 5) = std::numeric_limits<double>::quiet_NaN();
  BOOST_TEST_CONTEXT("a NaN in sample 5") {
    CheckAgainstCpu<double>(poisoned, o, run(poisoned, o, double(), std::integral_constant<int, 1>()), 1e-9);
  }
  PicardSolver<double>::Options damped = o;
  damped.damping = 0.5;
  damped.use_energy = false;
  damped.relative_tolerance = 1e-7;
  BOOST_TEST_CONTEXT("damped, no energy, relative tolerance") {
    CheckAgainstCpu<double>(p, damped, run(p, damped, double(), std::integral_constant<int, 1>()), 1e-8);
  }
  PicardSolver<double>::Options budget = o;
  budget.absolute_tolerance = 1e-14;
  budget.max_iterations = 4;
  BOOST_TEST_CONTEXT("budget: every sample returned at its kept iterate") {
    CheckAgainstCpu<double>(p, budget, run(p, budget, double(), std::integral_constant<int, 1>()), 1e-12);
  }
  const Problem wide = MakeProblem(40, 70, 12, 37);
  BOOST_TEST_CONTEXT("n = 40: two coordinates per lane") {
    CheckAgainstCpu<double>(wide, o, run(wide, o, double(), std::integral_constant<int, 2>()), 1e-9);
  }
  PicardSolver<float>::Options single;
  single.absolute_tolerance = 1e-5f;
  single.max_iterations = 300;
  BOOST_TEST_CONTEXT("float") {
    CheckAgainstCpu<float>(p, single, run(p, single, float(), std::integral_constant<int, 1>()), 1e-4);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_grid_kernel_follows_the_cpu_solver) {
  CheckCases([](const Problem& p, const auto& o, auto scalar, auto per_lane) {
    using S = decltype(scalar);
    return EmulateGrid<S, decltype(per_lane)::value>(p, FusedRules<S>(o), /*chunks=*/2, /*groups=*/2,
                                                     /*seed=*/7);
  });
}

// Two clusters of two blocks holding 8 samples each: the queue hands out the
// rest as samples stop, and the last ones run on sub-chunks.
BOOST_AUTO_TEST_CASE(the_cluster_kernel_follows_the_cpu_solver) {
  CheckCases([](const Problem& p, const auto& o, auto scalar, auto per_lane) {
    using S = decltype(scalar);
    constexpr int R = decltype(per_lane)::value;
    return EmulateClusters<S, R>(p, FusedRules<S>(o), /*cluster=*/2, /*clusters=*/2, /*slots=*/8, /*seed=*/11);
  });
}

// All 24 (or 12) samples in flight in a cluster of one block: phase A on the
// tensor cores (double) while more than eight are active, on two tiles of the
// 90 (70) patterns (48 and 42; 40 and 30), z zero-padded from n = 20 (40).
BOOST_AUTO_TEST_CASE(the_cluster_kernel_on_tensor_cores_follows_the_cpu_solver) {
  CheckCases([](const Problem& p, const auto& o, auto scalar, auto per_lane) {
    using S = decltype(scalar);
    constexpr int R = decltype(per_lane)::value;
    return EmulateClusters<S, R>(p, FusedRules<S>(o), /*cluster=*/1, /*clusters=*/1,
                                 /*slots=*/static_cast<int>(p.queries.cols()), /*seed=*/13);
  });
  // n = 70 (four coordinates per lane; 72 coordinates in 9 tiles of 8) and
  // 75 patterns over two blocks (one tile of 38 each, 40 rows with padding).
  PicardSolver<double>::Options o;
  o.absolute_tolerance = 1e-10;
  o.max_iterations = 300;
  const Problem p = MakeProblem(70, 75, 20, 53);
  BOOST_TEST_CONTEXT("n = 70, two blocks") {
    CheckAgainstCpu<double>(p, o, EmulateClusters<double, 4>(p, FusedRules<double>(o), 2, 1, 20, 17), 1e-9);
  }
}

// Other cluster shapes: one block per cluster (no distributed shared memory),
// four blocks, a full slot table with 60 samples (more positions than a
// one-block cluster has judging warps), phase A on the tensor cores or four
// samples per warp on the CUDA cores.
BOOST_AUTO_TEST_CASE(every_cluster_shape_follows_the_cpu_solver) {
  PicardSolver<double>::Options o;
  o.absolute_tolerance = 1e-10;
  o.max_iterations = 300;
  const Problem p = MakeProblem(20, 90, 60, 43);
  struct Shape {
    int cluster, clusters, slots;
    unsigned seed;  // 0: the fibers in thread order
    bool tensor_cores;
  };
  const int all = k::kClusterSlots;
  for (const Shape& s : {Shape{1, 3, 5, 0, true}, Shape{4, 1, 16, 3, true}, Shape{1, 1, all, 5, true},
                         Shape{2, 1, all, 0, false}}) {
    BOOST_TEST_CONTEXT("clusters of " << s.cluster << ", " << s.clusters << " clusters, " << s.slots << " slots, seed "
                                      << s.seed << (s.tensor_cores ? ", tensor cores" : ", CUDA cores")) {
      const auto kernel = EmulateClusters<double, 1>(p, FusedRules<double>(o), s.cluster, s.clusters, s.slots, s.seed,
                                                     s.tensor_cores);
      CheckAgainstCpu<double>(p, o, kernel, 1e-9);
    }
  }
}

// The phase probe: cluster 0's first block records every iteration: the
// active samples (all 24 at first, never more, their sum the samples'
// evaluations) and five clock readings in order; a record too small for the
// solve keeps what fits and nothing beyond.
BOOST_AUTO_TEST_CASE(the_phase_probe_records_every_iteration_of_the_first_cluster) {
  PicardSolver<double>::Options o;
  o.absolute_tolerance = 1e-10;
  o.max_iterations = 300;
  const Problem p = MakeProblem(20, 90, 24, 47);
  const int B = static_cast<int>(p.queries.cols()), F = k::kProbeFields;
  std::vector<long long> probe(1000 * F, -1);
  const auto kernel = EmulateClusters<double, 1>(p, FusedRules<double>(o), 2, 1, B, 0, true, &probe);
  long long evaluations = 0, last_iteration = 0;
  for (int b = 0; b < B; ++b) {
    evaluations += static_cast<long long>(kernel.results[4 * b + 1]) + 1;
    last_iteration = std::max(last_iteration, static_cast<long long>(kernel.results[4 * b + 1]));
  }
  int recorded = 0;
  while (recorded < 1000 && probe[recorded * F] != -1) ++recorded;
  BOOST_TEST(recorded == last_iteration + 1);  // every sample starts at once: the slowest decides
  BOOST_TEST(probe[0] == B);
  long long counted = 0, clock = 0;
  for (int t = 0; t < recorded; ++t) {
    BOOST_TEST_CONTEXT("iteration " << t) {
      const long long* r = probe.data() + t * F;
      BOOST_TEST(r[0] >= 1);
      if (t > 0) BOOST_TEST(r[0] <= r[-F]);  // no queue to refill from
      counted += r[0];
      for (int f = 1; f < F; ++f) {
        BOOST_TEST(r[f] > clock);
        clock = r[f];
      }
    }
  }
  BOOST_TEST(counted == evaluations);
  std::vector<long long> small(3 * F + 1, -1);
  EmulateClusters<double, 1>(p, FusedRules<double>(o), 2, 1, B, 0, true, &small);
  BOOST_REQUIRE(recorded > 3);
  for (int t = 0; t < 3; ++t) {
    BOOST_TEST(small[t * F] == probe[t * F]);  // the same solve: the same counts
    for (int f = 1; f < F; ++f) BOOST_TEST(small[t * F + f] > 0);  // clock readings
  }
  BOOST_TEST(small[3 * F] == -1);  // nothing beyond the capacity
}
