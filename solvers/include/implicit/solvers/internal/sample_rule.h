/// \file
/// The per-sample termination rule (internal), written once for the host and
/// the device: the CPU monitor's SampleJudge (sample_judge.h), the fused
/// Picard kernels (solvers/src/cuda/fused_picard_kernels.cuh) and Newton's
/// "will the monitor stop this sample" test (newton.cc) all call it, so a
/// sample is judged by the same arithmetic wherever it is solved. Plain inline
/// functions on doubles (no containers, no Eigen): `__host__ __device__` when
/// nvcc compiles them.
///
/// \code
///   SampleLimits limits;                 // tolerances, divergence, stall limit
///   SampleRecord record;                 // one sample's records between observations
///   bool keep = false;
///   const int verdict = JudgeFiniteSample(limits, &record, r, scale, true, energy, first, false, &keep);
/// \endcode
#pragma once

#include <cfloat>
#include <cmath>

#if defined(__CUDACC__)
#define IMPLICIT_HOST_DEVICE __host__ __device__
#else
#define IMPLICIT_HOST_DEVICE
#endif

namespace implicit {
namespace internal {

/// What a sample is judged against (from SolverOptions).
struct SampleLimits {
  double absolute_tolerance = 0, relative_tolerance = 0;
  /// Diverged when the residual exceeds this multiple of the first one.
  double divergence_threshold = 1e8;
  /// Stalled after this many observations without progress (0: never).
  int max_stall_iterations = 0;
  /// true (linear solves): converged when r <= relative_tolerance scale +
  /// absolute_tolerance; false (forward): when either tolerance holds alone.
  bool add_tolerances = false;
  /// The machine epsilon of the solve's scalar: an energy record counts as
  /// progress only beyond 16 epsilon (1 + |E|).
  double epsilon = 0;
};

/// One sample's records between observations.
struct SampleRecord {
  double best_residual = HUGE_VAL;  ///< the smallest residual so far
  double best_energy = HUGE_VAL;    ///< the lowest energy so far
  double initial_residual = 0;      ///< the first observation's residual
  int stall = 0;                    ///< observations since the last progress
};

/// How an observation leaves a sample.
enum SampleVerdict : int { kSampleRunning = 0, kSampleConverged, kSampleDiverged, kSampleStalled };

/// The tolerance rule alone: has a sample with residual r and scale (|f(z)|
/// forward, |rhs| linear) converged?
IMPLICIT_HOST_DEVICE inline bool SampleConverged(const SampleLimits& limits, double r, double scale) {
  if (limits.add_tolerances) return r <= limits.relative_tolerance * scale + limits.absolute_tolerance;
  return r <= limits.absolute_tolerance || r <= limits.relative_tolerance * scale;
}

/// Judges an observation whose values are all finite (a non-finite one ends
/// the sample before this: the caller's test, since only it knows which values
/// it computed). r: the residual, scale: what the relative tolerance
/// multiplies, energy: E at the iterate when has_energy, first: the solve's
/// first observation, exempt: an observation that does not count towards a
/// stall (an accelerated step the Picard fallback supervises). Progress is a
/// new residual record or, with the energy, a new energy record beyond
/// rounding; *keep is set when the iterate becomes the sample's kept one (a
/// residual record without the energy; with it, the lowest energy, ties to the
/// later iterate). Updates *record.
IMPLICIT_HOST_DEVICE inline int JudgeFiniteSample(const SampleLimits& limits, SampleRecord* record, double r,
                                                  double scale, bool has_energy, double energy, bool first,
                                                  bool exempt, bool* keep) {
  if (first) record->initial_residual = r;
  const bool residual_record = r < record->best_residual;
  if (residual_record) record->best_residual = r;
  bool kept = residual_record;
  bool progress = residual_record;
  if (has_energy) {
    const double slack = 16.0 * limits.epsilon * (1.0 + fabs(energy));
    progress = progress || energy < record->best_energy - slack;
    kept = energy <= record->best_energy;
    if (kept) record->best_energy = energy;
  }
  *keep = kept;
  if (progress) {
    record->stall = 0;
  } else if (!exempt) {
    ++record->stall;
  }
  if (SampleConverged(limits, r, scale)) return kSampleConverged;
  if (!first && r > limits.divergence_threshold * fmax(record->initial_residual, DBL_MIN)) return kSampleDiverged;
  if (limits.max_stall_iterations > 0 && record->stall >= limits.max_stall_iterations) return kSampleStalled;
  return kSampleRunning;
}

}  // namespace internal
}  // namespace implicit
