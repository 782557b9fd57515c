// Timing a problem's floor (FloorTiming, below).
#pragma once

#include <implicit/core/gemm.h>
#include <implicit/core/types.h>
#include <implicit/layers/log_sum_exp.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace implicit_apps {

using implicit::Index;
using implicit::Matrix;

// The floor of a problem: the dense products (GEMMs) one evaluation of its map
// on the whole batch must do, timed on their own. A solver iteration on B
// samples cannot be cheaper than this (on the same BLAS), so
// (solve seconds / sample evaluations) / (floor seconds / B) is the solver's
// and the map's overhead per sample-iteration over the bare products.
struct FloorTiming {
  std::string products;   // the products timed, with their shapes
  std::string note;       // what the floor leaves out / how it was estimated
  double flops = 0;       // 2 m k n summed over the products
  double seconds = std::numeric_limits<double>::quiet_NaN();  // median of the repetitions
  std::vector<double> samples;                                // each repetition, seconds
};

// Runs `body` once to warm up, then `repeats` times; the median wall time.
// `sink` is read after every run so that the products cannot be optimised away.
template <typename Body>
inline FloorTiming TimeFloor(std::string products, std::string note, double flops, int repeats,
                             Body&& body) {
  FloorTiming t;
  t.products = std::move(products);
  t.note = std::move(note);
  t.flops = flops;
  volatile double sink = 0;
  sink = sink + body();
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    const double v = body();
    t.samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    sink = sink + v;
  }
  std::vector<double> sorted = t.samples;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t m = sorted.size();
  t.seconds = m % 2 == 1 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
  return t;
}

inline std::string Shape(Index rows, Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// The two products of a Hopfield-type CCCP step on B queries with N stored
// patterns (n x N): scores S = X^T Z (N x n times n x B) and update X S
// (n x N times N x B), as the energies make them (ModernHopfieldEnergy,
// SparseHopfieldEnergy, the RBM's SeparableEnergy): in the column blocks of
// internal::ScoreBlocks, each block's S in a per-thread buffer that the
// second product reads, the blocks on Eigen's threads.
template <typename S>
FloorTiming HopfieldTypeFloor(const Matrix<S>& X, const Matrix<S>& Z, const std::string& x_name,
                              const std::string& note, int repeats) {
  const Index n = X.rows(), N = X.cols(), B = Z.cols();
  Matrix<S> out(n, B);
  const std::string t = x_name + "^T Z (" + Shape(N, n) + " * " + Shape(n, B) + ") + " + x_name + " P (" +
                        Shape(n, N) + " * " + Shape(N, B) + ") in blocks of " +
                        std::to_string(implicit::internal::ColumnBlockWidth(B)) + " columns";
  return TimeFloor(t, note, 4.0 * double(n) * double(N) * double(B), repeats, [&] {
    implicit::internal::ScoreBlocks<S>(X, Z, S(1), [&](Index c0, Index c, const auto& s) {
      implicit::GemmInto<S>(out.middleCols(c0, c), X, false, s);
    });
    return static_cast<double>(out(0, 0));
  });
}

}  // namespace implicit_apps
