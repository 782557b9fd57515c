// Node feature matrices for the graph detectors (implicit-graph): one round of
// neighbourhood aggregation and standardisation with training statistics.
//
//   Matrix<double> x = Standardize(graph.features, split.train);   // d x N
//   Matrix<double> both = WithNeighbourMean(graph, x);             // 2d x N
#pragma once

#include <implicit/core/graph_data.h>
#include <implicit/core/types.h>

#include <cmath>
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

}  // namespace implicit_apps
