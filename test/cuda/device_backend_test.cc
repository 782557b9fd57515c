// The GPU backend against the CPU path: the device Hopfield map (f, E, VJPs),
// the device solvers (fixed points, statuses, active set, NaN isolation) and
// the device implicit backward pass (IFT gradients). Cases that need a device
// are reported as skipped without one (CI); the option checks run anywhere.
#define BOOST_TEST_MODULE cuda_device_backend
#include <boost/test/unit_test.hpp>

#include <implicit/core/cuda_blas.h>
#include <implicit/core/cuda_hopfield.h>
#include <implicit/core/cuda_kernels.h>
#include <implicit/diff/cuda_backward.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/hopfield.h>
#include <implicit/layers/regularized_attention.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/cuda_solvers.h>
#include <implicit/solvers/internal/fused_picard.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/registry.h>

#include "support/device_gradient_checks.h"
#include "support/gpu.h"
#include "support/test_problems.h"

#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

namespace {

using namespace implicit;
using implicit::testing::GpuPresent;
using implicit::testing::RandomMatrix;

// A retrieval problem: N random patterns of norm about 1, queries near the
// first B of them.
struct Retrieval {
  Matrix<double> patterns, queries;
  double beta = 4.0;
};
Retrieval MakeRetrieval(Index n, Index N, Index B, unsigned seed) {
  Retrieval r;
  r.patterns = RandomMatrix<double>(n, N, seed, 1.0 / std::sqrt(double(n)));
  // (query b near pattern b mod N: a batch may be larger than the patterns)
  r.queries = RandomMatrix<double>(n, B, seed + 1, 0.3 / std::sqrt(double(n)));
  for (Index b = 0; b < B; ++b) r.queries.col(b) += r.patterns.col(b % N);
  return r;
}

// The CPU map of the same energy, with the patterns as the trainable
// parameters: ModernHopfieldEnergy (softmax) or SparseHopfieldEnergy with
// alpha = 2 (sparsemax).
std::unique_ptr<Energy<double>> CpuEnergy(const Retrieval& r, cuda::Attention attention) {
  if (attention == cuda::Attention::kSparsemax) {
    SparseHopfieldEnergy<double>::Options o;
    o.alpha = 2.0;
    o.beta = r.beta;
    return std::make_unique<SparseHopfieldEnergy<double>>(r.patterns, o);
  }
  ModernHopfieldEnergy<double>::Options o;
  o.beta = r.beta;
  o.learn_beta = false;
  o.learn_patterns = true;
  return std::make_unique<ModernHopfieldEnergy<double>>(r.patterns, o);
}
struct CpuHopfield {
  explicit CpuHopfield(const Retrieval& r, cuda::Attention attention = cuda::Attention::kSoftmax)
      : energy(CpuEnergy(r, attention)), map(*energy) {}
  std::unique_ptr<Energy<double>> energy;
  CccpMap<double> map;
};

const char* Name(cuda::Attention a) { return a == cuda::Attention::kSoftmax ? "softmax" : "sparsemax"; }

double MaxColumnResidual(const FixedPointMap<double>& map, const Matrix<double>& z) {
  Matrix<double> f(z.rows(), z.cols());
  map.Evaluate(z, f);
  return (f - z).colwise().norm().maxCoeff();
}

}  // namespace

// ---- runs without a device ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(device_solvers_take_the_registry_options_and_refuse_the_rest) {
  auto anderson = cuda::MakeDeviceSolver<double>("anderson", {{"memory", "7"}, {"mixing", "0.5"}});
  BOOST_TEST(anderson->name() == "anderson");
  auto* typed = dynamic_cast<cuda::DeviceAndersonSolver<double>*>(anderson.get());
  BOOST_REQUIRE(typed != nullptr);
  BOOST_TEST(typed->options().memory == 7);
  BOOST_TEST(typed->options().mixing == 0.5);
  BOOST_TEST(cuda::MakeDeviceSolver<float>("picard", {{"damping", "0.5"}})->name() == "picard");
  BOOST_CHECK_THROW(cuda::MakeDeviceSolver<double>("broyden"), std::invalid_argument);
  BOOST_CHECK_THROW(cuda::MakeDeviceSolver<double>("anderson", {{"memory", "64"}}), std::invalid_argument);
  BOOST_CHECK_THROW(cuda::MakeDeviceSolver<double>("anderson", {{"no_such_key", "1"}}), std::invalid_argument);
  AndersonSolver<double>::Options bad;
  bad.mixing = -1;
  BOOST_CHECK_THROW(cuda::DeviceAndersonSolver<double>{bad}, std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(without_a_device_a_context_fails_clearly) {
  if (cuda::Available()) return;  // only meaningful without a GPU
  try {
    cuda::Context context;
    BOOST_FAIL("a context was created without a device");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(std::string(e.what()).find("cuda::Context") != std::string::npos);
  }
}

// cuBLAS is opened on first use, not linked (cuda_blas.h): the library and
// every function the backend calls are found, with or without a device, and
// a second load is the first one.
BOOST_AUTO_TEST_CASE(cublas_loads_on_demand_with_every_function) {
  BOOST_CHECK_NO_THROW(cuda::internal::LoadCublas());
  BOOST_CHECK_NO_THROW(cuda::internal::LoadCublas());
}

// ---- the device Hopfield map -------------------------------------------------------------

void CheckMapAgainstCpu(cuda::Attention attention);

BOOST_AUTO_TEST_CASE(hopfield_map_value_energy_and_vjps_match_the_cpu, *boost::unit_test::precondition(GpuPresent())) {
  for (cuda::Attention attention : {cuda::Attention::kSoftmax, cuda::Attention::kSparsemax}) {
    BOOST_TEST_CONTEXT("attention " << Name(attention)) { CheckMapAgainstCpu(attention); }
  }
}

void CheckMapAgainstCpu(cuda::Attention attention) {
  const Index n = 24, N = 300, B = 37;
  Retrieval r = MakeRetrieval(n, N, B, 5);
  if (attention == cuda::Attention::kSparsemax) r.beta = 8.0;  // supports of a few patterns
  CpuHopfield cpu(r, attention);
  cuda::Context context;
  cuda::HopfieldCccpMap<double> gpu(context, r.patterns, r.beta, attention);
  cuda::DeviceMatrix<double> z(context, r.queries), out(n, B), energy(1, B), u(context, RandomMatrix<double>(n, B, 9));
  gpu.Evaluate(context, z.data(), B, nullptr, out.data(), energy.data());
  Matrix<double> f_cpu(n, B);
  Vector<double> e_cpu(B);
  cpu.map.EvaluateWithEnergy(r.queries, f_cpu, e_cpu);
  const Matrix<double> f_gpu = out.ToHost(context);
  const Matrix<double> e_gpu = energy.ToHost(context);
  BOOST_TEST((f_gpu - f_cpu).norm() <= 1e-12 * (1 + f_cpu.norm()));
  BOOST_TEST((e_gpu.transpose() - e_cpu).norm() <= 1e-12 * (1 + e_cpu.norm()));

  // Vector-Jacobian products, state and parameters.
  const Matrix<double> uh = u.ToHost(context);
  Matrix<double> vjp_cpu(n, B);
  cpu.map.VectorJacobianProduct(r.queries, uh, vjp_cpu);
  gpu.VectorJacobianProduct(context, z.data(), u.data(), B, nullptr, out.data());
  BOOST_TEST((out.ToHost(context) - vjp_cpu).norm() <= 1e-11 * (1 + vjp_cpu.norm()));
  Vector<double> dtheta_cpu(cpu.map.num_parameters());
  cpu.map.ParameterVectorJacobianProduct(r.queries, uh, dtheta_cpu);
  cuda::DeviceMatrix<double> dtheta(gpu.num_parameters(), 1);
  BOOST_REQUIRE(gpu.num_parameters() == cpu.map.num_parameters());
  gpu.ParameterVectorJacobianProduct(context, z.data(), u.data(), B, dtheta.data());
  const Matrix<double> dtheta_gpu = dtheta.ToHost(context);
  BOOST_TEST((dtheta_gpu.col(0) - dtheta_cpu).norm() <= 1e-11 * (1 + dtheta_cpu.norm()));

  // Float agrees to float precision.
  cuda::HopfieldCccpMap<float> gpu_float(context, r.patterns.cast<float>(), static_cast<float>(r.beta), attention);
  cuda::DeviceMatrix<float> zf(context, r.queries.cast<float>()), ff(n, B);
  gpu_float.Evaluate(context, zf.data(), B, nullptr, ff.data(), nullptr);
  BOOST_TEST((ff.ToHost(context).cast<double>() - f_cpu).norm() <= 1e-4 * (1 + f_cpu.norm()));
}

// ---- the device solvers ------------------------------------------------------------------

void CheckSolversAgainstCpu(cuda::Attention attention);

BOOST_AUTO_TEST_CASE(device_solvers_reach_the_cpu_fixed_points_with_the_same_statuses,
                     *boost::unit_test::precondition(GpuPresent())) {
  for (cuda::Attention attention : {cuda::Attention::kSoftmax, cuda::Attention::kSparsemax}) {
    BOOST_TEST_CONTEXT("attention " << Name(attention)) { CheckSolversAgainstCpu(attention); }
  }
}

void CheckSolversAgainstCpu(cuda::Attention attention) {
  const Index n = 32, N = 400, B = 64;
  const Retrieval r = MakeRetrieval(n, N, B, 11);
  CpuHopfield cpu(r, attention);
  cuda::Context context;
  cuda::HopfieldCccpMap<double> gpu(context, r.patterns, r.beta, attention);
  for (const std::string name : {"picard", "anderson"}) {
    BOOST_TEST_CONTEXT("solver " << name) {
      SolverOptions base;
      base.absolute_tolerance = 1e-10;
      base.max_iterations = 300;
      Matrix<double> z_cpu = r.queries, z_gpu = r.queries;
      const Summary s_cpu = MakeSolver<double>(name, {}, base)->Solve(cpu.map, z_cpu);
      const Summary s_gpu = cuda::MakeDeviceSolver<double>(name, {}, base)->Solve(context, gpu, z_gpu);
      BOOST_TEST(s_gpu.IsConverged());
      BOOST_TEST(s_cpu.IsConverged());
      BOOST_TEST(s_gpu.solver == name);
      BOOST_TEST(MaxColumnResidual(cpu.map, z_gpu) <= 1.01e-10);
      BOOST_TEST((z_gpu - z_cpu).norm() <= 1e-8 * (1 + z_cpu.norm()));
      BOOST_TEST(s_gpu.sample_status.size() == s_cpu.sample_status.size());
      for (std::size_t b = 0; b < s_cpu.sample_status.size(); ++b) {
        BOOST_TEST(static_cast<int>(s_gpu.sample_status[b]) == static_cast<int>(s_cpu.sample_status[b]));
        // Picard: same rule, same arithmetic up to rounding, so the iteration
        // counts agree within one step (Anderson's guard decisions near
        // rounding may differ, so only its statuses are compared).
        if (name == "picard") BOOST_TEST(std::abs(s_gpu.sample_iterations[b] - s_cpu.sample_iterations[b]) <= 1);
      }
      // The active set: samples stop at different iterations, and the map was
      // evaluated on the active ones only.
      if (s_gpu.iterations > 1) {
        BOOST_TEST(s_gpu.total_sample_evaluations() < static_cast<long long>(s_gpu.function_evaluations) * B);
      }
      // The energy decreased for every sample (CCCP and guarded steps never raise it).
      Matrix<double> f(n, B);
      Vector<double> e0(B), e1(B);
      cpu.map.EvaluateWithEnergy(r.queries, f, e0);
      cpu.map.EvaluateWithEnergy(z_gpu, f, e1);
      BOOST_TEST((e1.array() <= e0.array() + 1e-12).all());
    }
  }
}

BOOST_AUTO_TEST_CASE(anderson_on_the_device_accelerates_and_counts_its_guard,
                     *boost::unit_test::precondition(GpuPresent())) {
  const Index n = 64, N = 1000, B = 128;
  Retrieval r = MakeRetrieval(n, N, B, 17);
  r.beta = 1.0;  // a soft retrieval: Picard converges slowly, Anderson pays
  cuda::Context context;
  cuda::HopfieldCccpMap<double> gpu(context, r.patterns, r.beta);
  AndersonSolver<double>::Options ao;
  ao.absolute_tolerance = 1e-10;
  ao.max_iterations = 2000;
  PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-10;
  po.max_iterations = 2000;
  Matrix<double> za = r.queries, zp = r.queries;
  const Summary sa = cuda::DeviceAndersonSolver<double>(ao).Solve(context, gpu, za);
  const Summary sp = cuda::DevicePicardSolver<double>(po).Solve(context, gpu, zp);
  BOOST_TEST(sa.IsConverged());
  BOOST_TEST(sp.IsConverged());
  BOOST_TEST(sa.total_sample_evaluations() < sp.total_sample_evaluations());
  long long accelerated = 0;
  for (int v : sa.sample_accelerated_steps) accelerated += v;
  BOOST_TEST(accelerated > 0);
  BOOST_TEST((za - zp).norm() <= 1e-7 * (1 + zp.norm()));
}

BOOST_AUTO_TEST_CASE(a_nan_in_one_sample_stays_in_that_sample, *boost::unit_test::precondition(GpuPresent())) {
  const Index n = 16, N = 200, B = 20;
  const Retrieval r = MakeRetrieval(n, N, B, 23);
  cuda::Context context;
  cuda::HopfieldCccpMap<double> gpu(context, r.patterns, r.beta);
  for (const std::string name : {"picard", "anderson"}) {
    BOOST_TEST_CONTEXT("solver " << name) {
      SolverOptions base;
      base.absolute_tolerance = 1e-10;
      Matrix<double> clean = r.queries, poisoned = r.queries;
      poisoned(3, 7) = std::numeric_limits<double>::quiet_NaN();
      auto solver = cuda::MakeDeviceSolver<double>(name, {}, base);
      solver->Solve(context, gpu, clean);
      const Summary s = solver->Solve(context, gpu, poisoned);
      BOOST_TEST(!s.IsConverged());
      BOOST_TEST(TerminationTypeToString(s.termination_type) == std::string("non_finite"));
      for (Index b = 0; b < B; ++b) {
        if (b == 7) {
          BOOST_TEST(TerminationTypeToString(s.sample_status[b]) == std::string("non_finite"));
          continue;
        }
        BOOST_TEST(TerminationTypeToString(s.sample_status[b]) == std::string("converged"));
        BOOST_TEST(poisoned.col(b).allFinite());
        BOOST_TEST((poisoned.col(b) - clean.col(b)).norm() <= 1e-12);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(float_solves_converge_to_float_tolerance, *boost::unit_test::precondition(GpuPresent())) {
  const Index n = 32, N = 500, B = 50;
  const Retrieval r = MakeRetrieval(n, N, B, 29);
  CpuHopfield cpu(r);
  cuda::Context context;
  cuda::HopfieldCccpMap<float> gpu(context, r.patterns.cast<float>(), static_cast<float>(r.beta));
  SolverOptions base;
  base.absolute_tolerance = 1e-5;
  Matrix<float> z = r.queries.cast<float>();
  const Summary s = cuda::MakeDeviceSolver<float>("anderson", {}, base)->Solve(context, gpu, z);
  BOOST_TEST(s.IsConverged());
  BOOST_TEST(MaxColumnResidual(cpu.map, z.cast<double>()) <= 1e-4);
}

// ---- the fused Picard loop ----------------------------------------------------------------

// One device Picard solve of a copy of `start` with the given loop; the
// solution in *z.
template <typename S>
Summary DevicePicard(cuda::Context& context, const cuda::HopfieldCccpMap<S>& map, const Matrix<S>& start,
                     const typename PicardSolver<S>::Options& options, cuda::DeviceLoop loop, Matrix<S>* z) {
  *z = start;
  return cuda::DevicePicardSolver<S>(options, loop).Solve(context, map, *z);
}

bool RanFused(const Summary& s) { return s.message.find(cuda::kFusedLoopNote) != std::string::npos; }
bool RanClusters(const Summary& s) { return s.message.find(cuda::kClusterLoopNote) != std::string::npos; }

// A problem for the fused loops: n = 40 leaves lanes with two coordinates and
// idle ones, N = 700 patterns spread over several chunks (grid) or the blocks
// of a cluster, B = 300 samples over several sample groups or clusters.
struct FusedCase {
  Index n = 40, N = 700, B = 300;
  bool poison = false;  // a NaN in sample 17
};

// A fused loop (one kernel, every sample judged on the device) against the
// host-judged loop on the same device map: the same status for every sample,
// iteration counts within one, the same returned iterates (the kept one for a
// sample that did not converge).
template <typename S>
void CheckFusedAgainstHostJudged(cuda::DeviceLoop loop, const PicardSolver<double>::Options& base, double agree,
                                 const FusedCase& c = {}) {
  const Index B = c.B;
  const Retrieval r = MakeRetrieval(c.n, c.N, B, 31);
  cuda::Context context;
  const cuda::HopfieldCccpMap<S> map(context, r.patterns.cast<S>(), static_cast<S>(r.beta));
  typename PicardSolver<S>::Options o;
  static_cast<SolverOptions&>(o) = base;
  o.damping = base.damping;
  Matrix<S> start = r.queries.cast<S>(), z_fused, z_host;
  if (c.poison) start(5, 17) = std::numeric_limits<S>::quiet_NaN();
  const Summary fused = DevicePicard(context, map, start, o, loop, &z_fused);
  const Summary host = DevicePicard(context, map, start, o, cuda::DeviceLoop::kHostJudged, &z_host);
  BOOST_TEST_INFO("message: " << fused.message);
  BOOST_TEST(RanFused(fused));
  // (every case here fits a cluster)
  BOOST_TEST(RanClusters(fused) == (loop != cuda::DeviceLoop::kGridWhenPossible));
  const bool tensor_cores = loop == cuda::DeviceLoop::kFusedWhenPossible && std::is_same<S, double>::value;
  BOOST_TEST((fused.message.find("(tensor cores)") != std::string::npos) == tensor_cores);
  BOOST_TEST(!RanFused(host));
  BOOST_TEST(fused.solver == "picard");
  BOOST_TEST(TerminationTypeToString(fused.termination_type) == TerminationTypeToString(host.termination_type));
  BOOST_TEST(std::abs(fused.iterations - host.iterations) <= 1);
  BOOST_TEST(fused.function_evaluations == fused.iterations + 1);
  BOOST_TEST(fused.num_samples() == static_cast<int>(B));
  for (Index b = 0; b < B; ++b) {
    BOOST_TEST_CONTEXT("sample " << b) {
      BOOST_TEST(TerminationTypeToString(fused.sample_status[b]) == TerminationTypeToString(host.sample_status[b]));
      BOOST_TEST(std::abs(fused.sample_iterations[b] - host.sample_iterations[b]) <= 1);
      BOOST_TEST(fused.sample_evaluations[b] == fused.sample_iterations[b] + 1);
      if (c.poison && b == 17) continue;
      const double scale = 1 + z_host.col(b).template cast<double>().norm();
      BOOST_TEST((z_fused.col(b) - z_host.col(b)).template cast<double>().norm() <= agree * scale);
      BOOST_TEST(std::abs(fused.sample_residual[b] - host.sample_residual[b]) <= agree * scale);
    }
  }
  if (c.poison) {
    BOOST_TEST(TerminationTypeToString(fused.sample_status[17]) == std::string("non_finite"));
    BOOST_TEST(std::isinf(fused.absolute_residual));
  }
}

// The options of the fused loops' cases: every sample converges to 1e-10.
PicardSolver<double>::Options FusedCaseOptions() {
  PicardSolver<double>::Options o;
  o.absolute_tolerance = 1e-10;
  o.max_iterations = 300;
  return o;
}

// The cases both fused loops are held to.
void CheckFusedLoop(cuda::DeviceLoop loop) {
  const PicardSolver<double>::Options o = FusedCaseOptions();
  BOOST_TEST_CONTEXT("converged, double") { CheckFusedAgainstHostJudged<double>(loop, o, 1e-9); }
  FusedCase poisoned;
  poisoned.poison = true;
  BOOST_TEST_CONTEXT("a NaN in sample 17") { CheckFusedAgainstHostJudged<double>(loop, o, 1e-9, poisoned); }
  PicardSolver<double>::Options damped = o;
  damped.damping = 0.5;
  damped.use_energy = false;
  damped.relative_tolerance = 1e-7;
  BOOST_TEST_CONTEXT("damped, no energy, relative tolerance") {
    CheckFusedAgainstHostJudged<double>(loop, damped, 1e-8);
  }
  // The iteration budget ends every sample: each is returned at its kept
  // (lowest-energy) iterate, the same in both loops.
  PicardSolver<double>::Options budget = o;
  budget.absolute_tolerance = 1e-14;
  budget.max_iterations = 4;
  BOOST_TEST_CONTEXT("budget") { CheckFusedAgainstHostJudged<double>(loop, budget, 1e-12); }
  PicardSolver<double>::Options single = o;
  single.absolute_tolerance = 1e-5;
  BOOST_TEST_CONTEXT("float") { CheckFusedAgainstHostJudged<float>(loop, single, 1e-5); }
}

BOOST_AUTO_TEST_CASE(the_grid_picard_loop_follows_the_host_judged_loop, *boost::unit_test::precondition(GpuPresent())) {
  CheckFusedLoop(cuda::DeviceLoop::kGridWhenPossible);
}

// The cluster kernel (the default loop): the same cases, and two shapes of its own: more samples
// than the clusters hold at once (the queue hands out the rest as samples
// stop; n = 100: four coordinates per lane), and a float batch large enough
// for clusters of a single block.
BOOST_AUTO_TEST_CASE(the_cluster_picard_loop_follows_the_host_judged_loop,
                     *boost::unit_test::precondition(GpuPresent())) {
  CheckFusedLoop(cuda::DeviceLoop::kFusedWhenPossible);
  PicardSolver<double>::Options o = FusedCaseOptions();
  FusedCase queued;
  queued.n = 100;
  queued.N = 800;
  queued.B = 1500;
  BOOST_TEST_CONTEXT("queued samples") {
    CheckFusedAgainstHostJudged<double>(cuda::DeviceLoop::kFusedWhenPossible, o, 1e-9, queued);
  }
  FusedCase wide;
  wide.B = 5000;
  o.absolute_tolerance = 1e-5;
  BOOST_TEST_CONTEXT("clusters of one block") {
    CheckFusedAgainstHostJudged<float>(cuda::DeviceLoop::kFusedWhenPossible, o, 1e-5, wide);
  }
}

// The cluster kernel with phase A on the CUDA cores only (in double it
// otherwise runs on the tensor cores while more than eight samples are active).
BOOST_AUTO_TEST_CASE(the_cluster_loop_on_cuda_cores_follows_the_host_judged_loop,
                     *boost::unit_test::precondition(GpuPresent())) {
  CheckFusedLoop(cuda::DeviceLoop::kClustersOnCudaCores);
}

// A small solve of each fused kernel, for compute-sanitizer's racecheck
// (which takes minutes over the cases above): 24 samples, so the cluster
// kernel's phase A runs on the tensor cores while more than eight are active
// and in sub-chunks after.
BOOST_AUTO_TEST_CASE(a_small_fused_solve_for_the_sanitizers, *boost::unit_test::precondition(GpuPresent())) {
  const PicardSolver<double>::Options o = FusedCaseOptions();
  FusedCase small;
  small.N = 300;
  small.B = 24;
  BOOST_TEST_CONTEXT("clusters, tensor cores") {
    CheckFusedAgainstHostJudged<double>(cuda::DeviceLoop::kFusedWhenPossible, o, 1e-9, small);
  }
  BOOST_TEST_CONTEXT("clusters, CUDA cores") {
    CheckFusedAgainstHostJudged<double>(cuda::DeviceLoop::kClustersOnCudaCores, o, 1e-9, small);
  }
  BOOST_TEST_CONTEXT("grid") { CheckFusedAgainstHostJudged<double>(cuda::DeviceLoop::kGridWhenPossible, o, 1e-9, small); }
}

// Patterns a cluster cannot hold: the grid kernel runs, and the message says why.
BOOST_AUTO_TEST_CASE(too_many_patterns_for_a_cluster_fall_back_to_the_grid_kernel,
                     *boost::unit_test::precondition(GpuPresent())) {
  const Retrieval r = MakeRetrieval(100, 3000, 20, 41);
  cuda::Context context;
  const cuda::HopfieldCccpMap<double> map(context, r.patterns, r.beta);
  PicardSolver<double>::Options o;
  o.absolute_tolerance = 1e-10;
  Matrix<double> z;
  const Summary s = DevicePicard(context, map, r.queries, o, cuda::DeviceLoop::kFusedWhenPossible, &z);
  BOOST_TEST_INFO("message: " << s.message);
  BOOST_TEST(RanFused(s));
  BOOST_TEST(!RanClusters(s));
  const std::string reason = "no clusters: a cluster's share of the patterns and its working arrays do not fit";
  BOOST_TEST(s.message.find(reason) != std::string::npos);
}

// The cluster kernel's shape (host code: runs without a device). Device facts
// of an H100: 132 multiprocessors, 227 KiB of shared memory per block less
// the kernel's static 640 bytes (ptxas, sm_90).
BOOST_AUTO_TEST_CASE(cluster_shapes_fit_shared_memory_and_spread_small_batches) {
  namespace k = cuda::internal;
  const int sms = 132;
  const std::size_t limit = 227 * 1024 - 640;
  struct Shape {
    int n, N, B;
    std::size_t scalar;
  };
  for (const Shape& c : {Shape{64, 1797, 1797, 8}, Shape{40, 700, 300, 8}, Shape{40, 700, 5000, 4},
                         Shape{100, 800, 1500, 8}, Shape{256, 200, 10, 4}, Shape{8, 3, 2, 4}}) {
    BOOST_TEST_CONTEXT("n " << c.n << ", N " << c.N << ", B " << c.B << ", scalar " << c.scalar) {
      const k::ClusterShape s = k::ChooseClusterShape(c.n, c.N, c.B, c.scalar, sms, limit, k::kMaxClusterBlocks);
      BOOST_REQUIRE(s.cluster >= 1);
      BOOST_TEST(s.cluster <= k::kMaxClusterBlocks);
      BOOST_TEST((s.cluster & (s.cluster - 1)) == 0);  // a power of two
      BOOST_TEST(s.shared_bytes <= limit);
      BOOST_TEST(static_cast<long long>(s.chunk) * s.cluster >= c.N);      // every pattern has a block
      BOOST_TEST(static_cast<long long>(s.chunk) * (s.cluster - 1) < c.N);  // ... and the chunks are as even as can be
      // The patterns and the working arrays are what the shared memory holds.
      const std::size_t patterns = c.scalar * s.chunk * (c.n + 1);
      BOOST_TEST(s.shared_bytes > patterns);
      // Either no smaller cluster fits, or the batch is small enough that
      // the device holds it in flight at this size.
      if (s.cluster > 1) {
        const k::ClusterShape smaller = k::ChooseClusterShape(c.n, c.N, 1 << 30, c.scalar, sms, limit, s.cluster / 2);
        BOOST_TEST((smaller.cluster == 0 || static_cast<long long>(sms / s.cluster) * k::kClusterSlots >= c.B));
      }
    }
  }
  // hopfield-digits (n 64, N 1797, double): a cluster of 4 would hold 450
  // patterns in rows of 68 doubles (padded for the tensor cores), 248 064
  // bytes, over the limit; 8 hold 225 each.
  const k::ClusterShape digits = k::ChooseClusterShape(64, 1797, 1797, 8, sms, limit, k::kMaxClusterBlocks);
  BOOST_TEST(digits.cluster == 8);
  BOOST_TEST(digits.chunk == 225);
  // A handful of samples: the largest cluster (the most multiprocessors per sample).
  BOOST_TEST(k::ChooseClusterShape(40, 700, 10, 8, sms, limit, k::kMaxClusterBlocks).cluster == 8);
  // A batch the device cannot hold in flight: the smallest cluster that fits.
  BOOST_TEST(k::ChooseClusterShape(40, 700, 100000, 4, sms, limit, k::kMaxClusterBlocks).cluster == 1);
  // Nothing fits: 100 000 patterns of 257 doubles over 8 blocks; with n = 256
  // in double the working arrays alone (64 parts and 16 warps' buffers) exceed
  // the limit.
  BOOST_TEST(k::ChooseClusterShape(256, 100000, 100, 8, sms, limit, k::kMaxClusterBlocks).cluster == 0);
  BOOST_TEST(k::ChooseClusterShape(256, 8, 100, 8, sms, limit, k::kMaxClusterBlocks).cluster == 0);
  BOOST_TEST(k::ChooseClusterShape(0, 700, 10, 8, sms, limit, k::kMaxClusterBlocks).cluster == 0);
  BOOST_TEST(k::ChooseClusterShape(40, 700, 0, 8, sms, limit, k::kMaxClusterBlocks).cluster == 0);
}

// Trace and callbacks need the host in the loop: the fused loop is not used then.
BOOST_AUTO_TEST_CASE(a_callback_keeps_the_host_judged_loop, *boost::unit_test::precondition(GpuPresent())) {
  const Retrieval r = MakeRetrieval(16, 100, 10, 37);
  cuda::Context context;
  const cuda::HopfieldCccpMap<double> map(context, r.patterns, r.beta);
  PicardSolver<double>::Options o;
  int calls = 0;
  o.callback = [&calls](const IterationSummary&) {
    ++calls;
    return CallbackReturnType::kContinue;
  };
  Matrix<double> z;
  const Summary s = DevicePicard(context, map, r.queries, o, cuda::DeviceLoop::kFusedWhenPossible, &z);
  BOOST_TEST(!RanFused(s));
  BOOST_TEST(calls == s.iterations + 1);
  o.callback = nullptr;
  o.record_trace = true;
  const Summary traced = DevicePicard(context, map, r.queries, o, cuda::DeviceLoop::kFusedWhenPossible, &z);
  BOOST_TEST(!RanFused(traced));
  BOOST_TEST(traced.trace.size() == static_cast<std::size_t>(traced.iterations + 1));
}

// ---- the device backward pass ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(device_ift_gradients_match_the_cpu, *boost::unit_test::precondition(GpuPresent())) {
  const Index n = 24, N = 150, B = 30;
  const Retrieval r = MakeRetrieval(n, N, B, 31);
  CpuHopfield cpu(r);
  cuda::Context context;
  cuda::HopfieldCccpMap<double> gpu(context, r.patterns, r.beta);
  SolverOptions base;
  base.absolute_tolerance = 1e-13;
  base.max_iterations = 1000;
  cuda::DeviceMatrix<double> z(context, r.queries);
  BOOST_REQUIRE(cuda::MakeDeviceSolver<double>("anderson", {}, base)->Solve(context, gpu, z).IsConverged());
  const Matrix<double> z_star = z.ToHost(context);
  const Matrix<double> grad = RandomMatrix<double>(n, B, 37);
  cuda::DeviceMatrix<double> grad_device(context, grad);

  BackwardOptions cpu_options;
  cpu_options.tolerance = 1e-13;
  const BackwardResult<double> expected = ImplicitBackward(cpu.map, z_star, grad, cpu_options);
  BOOST_REQUIRE(expected.ok());
  implicit::testing::CheckDeviceGradients(context, gpu, z, grad_device, expected, /*compare_adjoint=*/true);
  BackwardOptions unsupported;
  unsupported.linear_solver = "minres";
  BOOST_CHECK_THROW(cuda::ImplicitBackward(context, gpu, z, grad_device, unsupported), std::invalid_argument);
  // A budget too small for the tolerance: every adjoint solver reports it, and
  // the parameter gradient is NaN, never a silent partial sum.
  for (const std::string linear : {"fixed_point", "anderson", "gmres"}) {
    BOOST_TEST_CONTEXT("adjoint solver " << linear) {
      BackwardOptions tight;
      tight.linear_solver = linear;
      tight.tolerance = 1e-14;
      tight.max_iterations = 2;
      const auto g = cuda::ImplicitBackward(context, gpu, z, grad_device, tight);
      BOOST_TEST(!g.ok());
      BOOST_TEST(static_cast<int>(g.summary.termination_type) == static_cast<int>(TerminationType::kMaxIterations));
      BOOST_TEST(g.parameter_gradient.ToHost(context).array().isNaN().all());
    }
  }
}

BOOST_AUTO_TEST_CASE(device_memory_does_not_grow_over_training_steps, *boost::unit_test::precondition(GpuPresent())) {
  const Index n = 32, N = 256, B = 64;
  const Retrieval r = MakeRetrieval(n, N, B, 41);
  cuda::Context context;
  cuda::HopfieldCccpMap<float> map(context, r.patterns.cast<float>(), 4.0f);
  cuda::DeviceMatrix<float> queries(context, r.queries.cast<float>()), z, grad;
  SolverOptions base;
  base.absolute_tolerance = 1e-5;
  auto solver = cuda::MakeDeviceSolver<float>("anderson", {}, base);
  BackwardOptions backward;
  backward.tolerance = 1e-6;
  auto step = [&] {
    z.CopyFrom(context, queries);
    solver->Solve(context, map, z);
    grad.CopyFrom(context, z);  // d(0.5 |z*|^2)/dz*
    for (const char* linear : {"anderson", "gmres"}) {
      backward.linear_solver = linear;
      const auto g = cuda::ImplicitBackward(context, map, z, grad, backward);
      BOOST_REQUIRE(g.parameter_gradient.rows() == map.num_parameters());
    }
  };
  step();
  std::size_t free_before = 0, free_after = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  for (int i = 0; i < 100; ++i) step();
  cudaMemGetInfo(&free_after, &total);
  // Allocations are made once; the driver may round pool sizes by a page or so.
  BOOST_TEST(static_cast<double>(free_before) - static_cast<double>(free_after) <= 2.0 * 1024 * 1024);
}
