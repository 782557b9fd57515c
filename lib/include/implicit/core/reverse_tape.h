// Reverse-mode derivatives of a scalar function by an ADOL-C tape: the
// engine behind AutoDiffEnergy's reverse mode (autodiff_energy.h), usable on
// its own for any f: R^n -> R written on adouble.
//
// The function is recorded once (Record) and the tape is then replayed at
// other points: a gradient costs a small multiple of one evaluation whatever
// n is, and a Hessian-vector product (second-order adjoints) a few more. A
// replay at a point where a comparison goes the other way than at the
// recording point (an `if` on a value, std::max, Eigen's maxCoeff) reports a
// branch switch; the callers then record again at that point, so derivatives
// are never those of the other branch. Branch-free forms (ad_functions.h:
// Max, Where, LogSumExp) replay without re-recording.
//
//   implicit::internal::ReverseTape tape(n);
//   std::unique_lock<std::recursive_mutex> lock = implicit::internal::ReverseTape::Lock();
//   tape.Record(z.data(), [&](const implicit::Vector<adouble>& za) { return f(za); });
//   double value; std::vector<double> grad(n);
//   if (!tape.GradientAndValue(z2.data(), &value, grad.data())) { /* record at z2 */ }
//
// ADOL-C keeps its tapes and their buffers in process-global state, so every
// call into a tape (recording and replays) must hold ReverseTape::Lock():
// reverse-mode products of several threads are correct but run one at a
// time. Tapes live in memory: their buffers are sized to the recorded tape.
// The first recording of a tape larger than ADOL-C's default buffers is
// written to files before its size is known; they go into a private
// directory (TMPDIR or /tmp, libimplicit-adolc-XXXXXX, removed at exit), never
// into the current directory.
// ADOL-C's branch-switch warnings on stderr are turned off (process-wide)
// when the first tape is made, since the re-recording is automatic.
// Only compiled when libimplicit was built with ADOL-C (IMPLICIT_HAVE_ADOLC).
#pragma once

#if IMPLICIT_HAVE_ADOLC

#include <implicit/core/types.h>

#include <adolc/adouble.h>
#include <adolc/taping.h>

#include <cstddef>
#include <mutex>
#include <utility>

namespace Eigen {
// adouble as an Eigen scalar (element-wise operations, reductions, products).
template <>
struct NumTraits<adouble> : NumTraits<double> {
  typedef adouble Real;
  typedef adouble NonInteger;
  typedef adouble Nested;
  typedef adouble Literal;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 1,
    AddCost = 3,
    MulCost = 3
  };
};
}  // namespace Eigen

namespace implicit {
namespace internal {

class ReverseTape {
 public:
  // A tape of a function of `size` independent variables (not yet recorded).
  explicit ReverseTape(Index size);
  ~ReverseTape();
  // A copy has its own (empty) tape: it records at its first use.
  ReverseTape(const ReverseTape& other) : ReverseTape(other.size_) {}
  ReverseTape& operator=(const ReverseTape& other);

  // The lock every call below must hold (ADOL-C's state is process-global).
  static std::unique_lock<std::recursive_mutex> Lock();

  Index size() const { return size_; }
  bool recorded() const { return recorded_; }

  // Records f (a callable Vector<adouble> -> adouble) at the point z
  // (size() values). If f throws, nothing is recorded and the exception
  // propagates.
  template <typename F>
  void Record(const double* z, F&& f);

  // *value = f(z), grad = df/dz (size() values). False, with nothing written,
  // when z takes another branch than the recording point (record again).
  bool GradientAndValue(const double* z, double* value, double* grad) const;
  // out = d^2f/dz^2 v (size() values). False on a branch switch (out is then
  // unspecified: record again and repeat).
  bool HessianVectorProduct(const double* z, const double* v, double* out) const;

 private:
  void BeginRecording();
  // Ends the recording with f's value; returns false when the tape outgrew
  // its buffers (they are enlarged: record once more).
  bool EndRecording(adouble& value);

  short tag_;
  Index size_;
  bool recorded_ = false;
  // Buffer sizes (operations, locations, values, Taylor stack) for the next
  // recording: ADOL-C's defaults, grown to the largest tape recorded so far.
  std::size_t buffers_[4];
};

template <typename F>
void ReverseTape::Record(const double* z, F&& f) {
  for (;;) {
    BeginRecording();
    adouble value;
    try {
      Vector<adouble> za(size_);
      for (Index i = 0; i < size_; ++i) za(i) <<= z[i];
      value = f(za);
    } catch (...) {
      EndRecording(value);
      recorded_ = false;
      throw;
    }
    if (EndRecording(value)) break;
  }
  recorded_ = true;
}

}  // namespace internal
}  // namespace implicit

#endif  // IMPLICIT_HAVE_ADOLC
