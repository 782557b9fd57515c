/// \file
/// Forward solvers on the device: Picard and the energy-guarded Anderson, with
/// the CPU solvers' Options and Summary (picard.h, anderson.h, solver.h).
///
/// The batch stays on the device for the whole solve. Each iteration computes,
/// on the device, every active sample's residual |f(z_b) - z_b|, |f(z_b)|,
/// E(z_b) and a finiteness flag, and copies only those scalars to the host,
/// where the CPU solvers' own per-sample monitor judges them (tolerances,
/// divergence, stalls, NaN, best iterate) and the CPU guard's acceptance rules
/// decide each trial step; the decisions go back as per-sample index lists
/// and coefficients. So statuses, counters and the returned iterates follow
/// exactly the rules of the CPU solvers. The active set is compacted on the
/// device: once samples stop, the map is evaluated on the active columns only
/// (gathered into one contiguous block: GEMMs of the active width). Picard on
/// a softmax HopfieldCccpMap goes further and runs the whole solve as one
/// kernel that judges the samples on the device by the same rules (DeviceLoop).
///
/// DeviceAndersonSolver keeps each sample's ring of (dZ, dG) pairs and its
/// m x m Gram matrix on the device; one kernel per iteration (one thread block
/// per sample) pushes the newest pair, solves the ridged least-squares system
/// by Cholesky in double precision, applies the predicted-gain gate
/// (max_predicted_residual) and the fast-contraction rule (fast_contraction)
/// and forms the proposal q. memory is
/// limited to kMaxDeviceAndersonMemory. The CPU Anderson's Picard fallback
/// (FallbackOptions: warm-up, progress windows) is not mirrored yet: those
/// options are ignored here (docs/gpu.md, "Not on the device yet").
///
/// \code
///   implicit::cuda::Context context;
///   implicit::cuda::HopfieldCccpMap<double> map(context, patterns, 2.0);
///   implicit::cuda::DeviceMatrix<double> z(context, queries);
///   implicit::AndersonSolver<double>::Options options;
///   options.absolute_tolerance = 1e-8;
///   implicit::Summary s = implicit::cuda::DeviceAndersonSolver<double>(options).Solve(context, map, z);
///   // or by name, with the registry's option strings:
///   auto solver = implicit::cuda::MakeDeviceSolver<double>("anderson", {{"memory", "5"}});
/// \endcode
#pragma once

#include <implicit/core/cuda_device.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/solver.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace implicit {
namespace cuda {

/// The largest Anderson memory the device kernel takes (its Gram system lives
/// in one thread block's shared memory).
inline constexpr int kMaxDeviceAndersonMemory = 32;

/// Base class of the device forward solvers: a batch on the device, the CPU
/// solvers' Options and Summary.
template <typename Scalar>
class DeviceSolver {
 public:
  virtual ~DeviceSolver() = default;
  /// The registered name ("picard", "anderson").
  virtual std::string name() const = 0;
  /// Solves z_b = f(z_b) for every column of z in place (z: n x B on the
  /// device), from z's values; a sample that did not converge is returned at
  /// its best iterate.
  /// \return the per-sample outcome and the work done.
  /// \throws std::invalid_argument when z is not n x B with B >= 1 (n the
  ///         map's dimension).
  virtual Summary Solve(Context& context, const DeviceMap<Scalar>& map,
                        DeviceMatrix<Scalar>& z) const = 0;
  /// The same for a host batch (z: n x B on the host): copies z to the
  /// device, solves, copies back.
  Summary Solve(Context& context, const DeviceMap<Scalar>& map, MatrixRef<Scalar> z) const;
};

/// Which loop DevicePicardSolver runs. kFusedWhenPossible (the default): for
/// a cuda::HopfieldCccpMap with softmax attention (n <= 256), without
/// record_trace or a callback, the whole solve is one kernel that judges every
/// sample on the device by the same rules (no host round trip per iteration;
/// trace and per-iteration callbacks are not available): the kernel in
/// thread-block clusters where all the patterns fit in a cluster's shared
/// memory (sm_90; each cluster holds all the patterns and solves its own
/// samples, taking the next from a queue as one stops; in double its phase A,
/// the scores and weighted sums of the patterns, runs on the FP64 tensor
/// cores while more than eight samples of a cluster are active; message
/// ending with kClusterLoopNote, then "(tensor cores)"), else the grid kernel
/// (a cooperative kernel over chunks of the patterns with grid-wide barriers;
/// message ending with kFusedLoopNote and why no cluster loop). Where neither
/// applies, and with kHostJudged, the loop described in cuda_solvers.h (for a
/// softmax HopfieldCccpMap its message then says why the fused loop was not
/// used). The cluster kernel is the default because it was measured faster:
/// hopfield-digits 3.41 ms against 4.89 ms for the grid kernel on an H200
/// (docs/gpu.md). kGridWhenPossible: the grid kernel only;
/// kClustersOnCudaCores: the cluster kernel with phase A on the CUDA cores only
/// (both for comparison).
enum class DeviceLoop { kFusedWhenPossible, kHostJudged, kGridWhenPossible, kClustersOnCudaCores };
/// The end of Summary::message when DevicePicardSolver ran the fused loop.
inline constexpr const char* kFusedLoopNote = "fused device loop";
/// The end of Summary::message when DevicePicardSolver ran the fused loop in
/// thread-block clusters.
inline constexpr const char* kClusterLoopNote = "fused device loop in thread-block clusters";

/// Damped Picard iteration on the device, with the CPU PicardSolver's rules;
/// on a softmax HopfieldCccpMap the whole solve can run as one fused kernel
/// (DeviceLoop).
template <typename Scalar>
class DevicePicardSolver : public DeviceSolver<Scalar> {
 public:
  /// The CPU PicardSolver's options.
  using Options = typename PicardSolver<Scalar>::Options;
  /// A solver with the given options, running the given loop.
  /// \throws std::invalid_argument when options.IsValid() fails.
  explicit DevicePicardSolver(const Options& options = Options(), DeviceLoop loop = DeviceLoop::kFusedWhenPossible);
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  /// The loop the solver was asked to run (see DeviceLoop).
  DeviceLoop loop() const { return loop_; }
  std::string name() const override { return "picard"; }
  using DeviceSolver<Scalar>::Solve;
  Summary Solve(Context& context, const DeviceMap<Scalar>& map,
                DeviceMatrix<Scalar>& z) const override;

 private:
  Options options_;
  DeviceLoop loop_;
};

/// The energy-guarded Anderson acceleration on the device, with the CPU
/// AndersonSolver's rules (but without its Picard fallback; see cuda_solvers.h).
template <typename Scalar>
class DeviceAndersonSolver : public DeviceSolver<Scalar> {
 public:
  /// The CPU AndersonSolver's options (the FallbackOptions fields are ignored).
  using Options = typename AndersonSolver<Scalar>::Options;
  /// A solver with the given options.
  /// \throws std::invalid_argument on invalid options or memory > kMaxDeviceAndersonMemory.
  explicit DeviceAndersonSolver(const Options& options = Options());
  /// The options the solver was built with.
  const Options& options() const { return options_; }
  std::string name() const override { return "anderson"; }
  using DeviceSolver<Scalar>::Solve;
  Summary Solve(Context& context, const DeviceMap<Scalar>& map,
                DeviceMatrix<Scalar>& z) const override;

 private:
  Options options_;
};

/// The solvers that run on the device: picard, anderson.
std::vector<std::string> DeviceSolverNames();

/// The device solver `name` with the registry's option strings and shared base
/// (registry.h: the same keys, parsing and validation as MakeSolver).
/// \throws std::invalid_argument for a solver that has no device version
///         (listing those that do), an unknown key or a bad value.
template <typename Scalar>
std::unique_ptr<DeviceSolver<Scalar>> MakeDeviceSolver(
    const std::string& name, const std::map<std::string, std::string>& options = {},
    const SolverOptions& base = {});

/// \cond INTERNAL
extern template class DeviceSolver<float>;
extern template class DeviceSolver<double>;
extern template class DevicePicardSolver<float>;
extern template class DevicePicardSolver<double>;
extern template class DeviceAndersonSolver<float>;
extern template class DeviceAndersonSolver<double>;
/// \endcond

}  // namespace cuda
}  // namespace implicit
