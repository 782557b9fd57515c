// Node feature matrices for the graph detectors (implicit-graph):
// standardisation with training statistics, one round of neighbourhood
// averaging, and K rounds of the GCN's degree-normalised propagation
// S = D^-1/2 (A + I) D^-1/2 (D the degrees of A + I), the adjacency the GCN
// baseline (gcn_detector.h) multiplies by.
//
//   Matrix<double> x = Standardize(graph.features, split.train);   // d x N
//   Matrix<double> both = WithNeighbourMean(graph, x);             // 2d x N
//   Matrix<double> hops = WithPropagated(graph, x, 2);             // [x; S x; S^2 x], 3d x N
#pragma once

#include <implicit/core/graph_data.h>
#include <implicit/core/types.h>

#include <Eigen/SparseCore>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace implicit_apps {

using implicit::Index;
using implicit::Matrix;

// Each row (feature) centred and scaled by its mean and standard deviation over
// the `train` columns (a constant feature is only centred).
inline Matrix<double> Standardize(const Matrix<double>& x, const std::vector<Index>& train) {
  Matrix<double> out = x;
  for (Index r = 0; r < x.rows(); ++r) {
    double mean = 0, square = 0;
    for (Index i : train) mean += x(r, i);
    mean /= static_cast<double>(train.size());
    for (Index i : train) square += (x(r, i) - mean) * (x(r, i) - mean);
    const double sd = std::sqrt(square / static_cast<double>(train.size()));
    out.row(r) = (x.row(r).array() - mean) / (sd > 0 ? sd : 1.0);
  }
  return out;
}

// [x_i; mean of x_j over the neighbours j of i] (zeros for an isolated node).
inline Matrix<double> WithNeighbourMean(const implicit::GraphDataset& g, const Matrix<double>& x) {
  const Index d = x.rows(), n = x.cols();
  Matrix<double> out = Matrix<double>::Zero(2 * d, n);
  out.topRows(d) = x;
  for (Index i = 0; i < n; ++i) {
    const Index degree = g.degree(i);
    if (degree == 0) continue;
    for (Index k = g.row_offsets[i]; k < g.row_offsets[i + 1]; ++k) out.col(i).tail(d) += x.col(g.neighbors[k]);
    out.col(i).tail(d) /= static_cast<double>(degree);
  }
  return out;
}

// S = D^-1/2 (A + I) D^-1/2, N x N, with D the degrees of A + I: A's rows are
// g's CSR lists (a stored self-loop adds to the one A + I has), so an isolated
// node's row is S_ii = 1.
inline Eigen::SparseMatrix<double, Eigen::RowMajor> NormalizedAdjacency(const implicit::GraphDataset& g) {
  const Index n = g.num_nodes();
  std::vector<Eigen::Triplet<double>> entries;
  entries.reserve(g.neighbors.size() + static_cast<std::size_t>(n));
  std::vector<double> degree(static_cast<std::size_t>(n), 1.0);
  for (Index i = 0; i < n; ++i) {
    entries.emplace_back(i, i, 1.0);
    for (Index k = g.row_offsets[i]; k < g.row_offsets[i + 1]; ++k) {
      entries.emplace_back(i, g.neighbors[k], 1.0);
      degree[i] += 1.0;
    }
  }
  for (auto& e : entries)
    e = Eigen::Triplet<double>(e.row(), e.col(), e.value() / std::sqrt(degree[e.row()] * degree[e.col()]));
  Eigen::SparseMatrix<double, Eigen::RowMajor> s(n, n);
  s.setFromTriplets(entries.begin(), entries.end());
  return s;
}

// [x; x S^T; ...; x (S^T)^hops] ((hops + 1) d x N): node i's features, then
// their propagation 1..hops rounds along the graph (column i of x S^T is
// sum_j S_ij x_j). hops = 0 returns x.
inline Matrix<double> WithPropagated(const implicit::GraphDataset& g, const Matrix<double>& x, int hops) {
  if (hops < 0) throw std::invalid_argument("WithPropagated: hops must be >= 0");
  const Index d = x.rows();
  Matrix<double> out(d * (hops + 1), x.cols());
  out.topRows(d) = x;
  if (hops == 0) return out;
  const Eigen::SparseMatrix<double, Eigen::RowMajor> s_transpose = NormalizedAdjacency(g).transpose();
  for (int h = 1; h <= hops; ++h) out.middleRows(h * d, d) = out.middleRows((h - 1) * d, d) * s_transpose;
  return out;
}

}  // namespace implicit_apps
