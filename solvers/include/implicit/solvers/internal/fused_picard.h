/// \file
/// The fused Picard loops of the softmax Hopfield map (internal; CUDA builds
/// only): launchers of the kernels in solvers/src/cuda/fused_picard.cu, which
/// DevicePicardSolver runs (cuda_solvers.h, DeviceLoop).
///
/// \code
///   cuda::internal::FusedPicardPlan plan;
///   const char* why_not = nullptr;
///   if (cuda::internal::PlanClusterHopfieldPicard<double>(n, N, batch, &plan, &why_not))
///     cuda::internal::ClusterHopfieldPicard<double>(stream, plan, patterns, n, N, beta, z, batch,
///                                                   rules, workspace, results);
/// \endcode
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/solvers/internal/fused_picard.h needs libimplicit built with CUDA"
#endif

#include <implicit/core/cuda_kernels.h>
#include <implicit/solvers/internal/sample_rule.h>

#include <cstddef>

namespace implicit {
namespace cuda {
namespace internal {

// One kernel runs a whole damped Picard solve
// z_b <- z_b + damping (X softmax(beta X^T z_b) - z_b) of every sample and
// judges each sample on the device after each evaluation by the forward rules
// of the host monitor (JudgeFiniteSample, solvers/internal/sample_rule.h; non-finite values,
// absolute or relative tolerance, divergence against the first residual,
// the stall rule with or without the energy, the kept lowest-energy iterate,
// max_iterations). No host round trip per iteration: the loop stays on the
// device. The patterns are split into chunks held in the blocks' shared
// memory; the softmax is split over the chunks (running max and sum per
// chunk, merged per sample). Two forms:
// - FusedHopfieldPicard: one cooperative grid, chunks x sample groups; the
//   active samples are compacted after each iteration (two grid barriers);
// - ClusterHopfieldPicard (sm_90): thread-block clusters, each holding all
//   the patterns over its blocks and solving its own samples, kClusterSlots
//   at a time, taken from a queue as earlier ones stop (cluster barriers only).

/// How a sample ended (kFusedRunning: not yet).
enum FusedStop : int {
  kFusedRunning = 0, kFusedConverged, kFusedDiverged, kFusedStalled, kFusedNonFinite, kFusedMaxIterations
};
/// A Picard solver's options as the kernels take them: the per-sample rule's
/// limits (sample_rule.h, the CPU monitor's own) and the loop's.
struct FusedPicardRules {
  int max_iterations = 100;
  implicit::internal::SampleLimits limits;
  bool use_energy = true;
  double damping = 1;
};
/// The launch shape on the current device (PlanFusedHopfieldPicard,
/// PlanClusterHopfieldPicard). For the cluster kernel pattern_chunks is the
/// blocks per cluster, sample_groups the clusters and slots the samples each
/// keeps in flight; tensor_cores (double only, set by the plan): its phase A
/// runs on the tensor cores while at least half its warps' worth of samples
/// are active (clear it to keep phase A on the CUDA cores).
struct FusedPicardPlan {
  int pattern_chunks = 0, sample_groups = 0, chunk = 0, per_lane = 0;  ///< per_lane: coordinates per lane
  int slots = 0;
  bool tensor_cores = false;
  std::size_t shared_bytes = 0, workspace_bytes = 0;
};
/// Plans the grid kernel for n x N patterns and a batch of B; false (with the
/// reason in *why_not) when it does not apply: n > 256, a chunk of patterns
/// that does not fit in shared memory, or no cooperative launch.
template <typename S>
bool PlanFusedHopfieldPicard(int n, int N, int batch, FusedPicardPlan* plan, const char** why_not);
/// Plans the cluster kernel; false (with the reason) when n > 256, the device
/// or the build has no thread-block clusters (sm_90), or a cluster of
/// kMaxClusterBlocks blocks cannot hold the patterns and its working arrays in
/// shared memory.
template <typename S>
bool PlanClusterHopfieldPicard(int n, int N, int batch, FusedPicardPlan* plan, const char** why_not);
/// Solve in place (z: n x batch) with the planned kernel. workspace:
/// plan.workspace_bytes of device memory. results (device, 4 x batch doubles):
/// per sample its FusedStop, iterations, final residual (at its kept iterate
/// when it did not converge, where z is then returned) and relative residual.
template <typename S>
void FusedHopfieldPicard(cudaStream_t stream, const FusedPicardPlan& plan, const S* patterns, int n, int N, S beta,
                         S* z, int batch, const FusedPicardRules& rules, void* workspace, double* results);
/// probe (optional, device memory): the phase probe's record (below).
template <typename S>
void ClusterHopfieldPicard(cudaStream_t stream, const FusedPicardPlan& plan, const S* patterns, int n, int N, S beta,
                           S* z, int batch, const FusedPicardRules& rules, void* workspace, double* results,
                           long long* probe = nullptr, int probe_iterations = 0);
/// The cluster kernel's phase probe, for benchmarks: the first block of
/// cluster 0 records per iteration (up to probe_iterations) kProbeFields
/// values: the active samples, then the clock (ns, %globaltimer) when its
/// iteration starts, when its thread 0 ends phase A, after the cluster barrier
/// that ends phase A (all its blocks' phase A), when thread 0 ends phase B, and
/// after the barrier that ends the iteration.
inline constexpr int kProbeFields = 6;

///@{
/// The cluster kernel's samples in flight per cluster (one per warp slot of
/// its phase A: 16 warps x 4) and its largest cluster (the portable size).
inline constexpr int kClusterSlots = 64;
inline constexpr int kMaxClusterBlocks = 8;
///@}
/// Its shape: blocks per cluster, patterns per block and dynamic shared memory
/// per block (cluster = 0: nothing fits).
struct ClusterShape {
  int cluster = 0, chunk = 0;
  std::size_t shared_bytes = 0;
};
/// The shape for n x N patterns of scalar_bytes scalars and a batch of B on a
/// device with `sms` multiprocessors and shared_limit bytes of dynamic shared
/// memory per block: the smallest cluster (1, 2, 4, ... <= max_cluster blocks)
/// whose share of the patterns fits with the working arrays, doubled while
/// sms / cluster clusters still hold the whole batch in flight (the last,
/// slowest samples of a batch then run on more multiprocessors). Host code; no
/// device needed.
ClusterShape ChooseClusterShape(int n, int N, int batch, std::size_t scalar_bytes, int sms, std::size_t shared_limit,
                                int max_cluster);

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
