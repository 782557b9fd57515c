// The interface of implicit-compare's and implicit-bench's built-in
// equilibrium problems, and what the problems share. Each problem is one file
// apps/problems/<name>.cc that registers itself (registry.h).
//
// Every problem is a template on the scalar (built as ProblemT<double> and
// ProblemT<float>); the float build casts the same data and weights (drawn in
// double) to float.
#pragma once

#include "problems/floor.h"

#include <implicit/core/digits.h>
#include <implicit/core/map.h>
#include <implicit/core/types.h>
#ifdef IMPLICIT_WITH_CUDA
#include <implicit/core/cuda_device.h>
#endif

#include "common/format.h"

#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>

namespace implicit_apps {

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

// Settings the problems read (from the command line).
struct ProblemSettings {
  int patterns = 100;   // stored patterns / samples taken from the digits
  double beta = 1.0;    // inverse temperature of the Hopfield-type problems
  unsigned seed = 1;    // random weights
  // The problems' own parameters (ProblemParameter, registry.h) by name;
  // a missing one has its registered default.
  std::map<std::string, double> parameters;
  double Parameter(const std::string& name) const;  // registry.cc
};

template <typename S>
class ProblemT {
 public:
  virtual ~ProblemT() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual const implicit::FixedPointMap<S>& map() const = 0;
  // The starting batch (n x B); solvers get a copy.
  const Matrix<S>& initial() const { return initial_; }
  // Times this problem's floor (see FloorTiming): the median of `repeats`
  // runs of the products one full-batch map evaluation must do, in S.
  virtual FloorTiming MeasureFloor(int repeats) const = 0;
#ifdef IMPLICIT_WITH_CUDA
  // The same map on the GPU (implicit-compare --device cuda), or nullptr when
  // the problem has no device map yet.
  virtual std::unique_ptr<implicit::cuda::DeviceMap<S>> MakeDeviceMap(implicit::cuda::Context&) const {
    return nullptr;
  }
#endif

 protected:
  Matrix<S> initial_;
};
using Problem = ProblemT<double>;

// The stored patterns (first N digits, x/8 - 1) and queries (pixels 32..63 = 0).
struct DigitPatterns {
  Matrix<double> patterns;
  Matrix<double> queries;
};
inline DigitPatterns MakeDigitPatterns(const implicit::DigitsDataset& digits, int n) {
  DigitPatterns d;
  d.patterns = digits.Scaled().leftCols(n);
  d.queries = d.patterns;
  d.queries.bottomRows(32).setZero();
  return d;
}

// The scalar a computation runs in: its name and largest finite value.
struct ScalarRange {
  std::string name;
  double max = 0;
};
template <typename S>
ScalarRange RangeOf() {
  return {std::is_same<S, float>::value ? "float" : "double", static_cast<double>(std::numeric_limits<S>::max())};
}

// The largest |x_i . xi| of the first n digits x_i (x/8 - 1) with any xi in
// their convex hull (the Hopfield retrieval states and queries): max |x_i|^2.
inline double MaxDigitScore(const implicit::DigitsDataset& digits, int n) {
  return digits.Scaled().leftCols(n).colwise().squaredNorm().maxCoeff();
}

// Why `option` = `value` cannot give a finite computation, or "": the
// product `value` x `bound` (described by `product`, e.g. "beta * max|score|")
// must stay a factor 4 inside the scalar's range (a softmax also forms the
// differences of such products).
inline std::string ScaleRangeError(const std::string& option, const std::string& product, double value,
                                   double bound, const ScalarRange& scalar) {
  const double limit = scalar.max / (4.0 * bound);
  if (!(bound > 0) || value <= limit) return "";
  return option + ": " + product + " = " + Fmt(value) + " * " + Fmt(bound) + " is beyond the range of " +
         scalar.name + " (" + Fmt(scalar.max) + "); the results would be inf or nan, use " + option +
         " <= " + Fmt(limit * 0.999, 3);
}

inline Matrix<double> RandomGaussian(Index rows, Index cols, double scale, std::mt19937& gen) {
  std::normal_distribution<double> dist(0.0, scale);
  Matrix<double> m(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) m(i, j) = dist(gen);
  return m;
}

}  // namespace implicit_apps
