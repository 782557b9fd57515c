// SolveMixedPrecision: the float stage, then the double stage from its result.
#include <implicit/solvers/mixed_precision.h>

#include <stdexcept>
#include <string>

namespace implicit {

MixedPrecisionSummary SolveMixedPrecision(const Solver<float>& float_solver, const FixedPointMap<float>& float_map,
                                          const Solver<double>& double_solver,
                                          const FixedPointMap<double>& double_map, MatrixRef<double> z) {
  if (float_map.dimension() != double_map.dimension() || double_map.dimension() != z.rows()) {
    throw std::invalid_argument("SolveMixedPrecision: the float map has dimension " +
                                std::to_string(float_map.dimension()) + ", the double map " +
                                std::to_string(double_map.dimension()) + " and z has " +
                                std::to_string(z.rows()) + " rows; they must agree");
  }
  MixedPrecisionSummary summary;
  Matrix<float> single = z.cast<float>();
  summary.single = float_solver.Solve(float_map, single);
  for (Index b = 0; b < z.cols(); ++b) {
    // A sample the float stage could not represent or lost keeps its start.
    if (single.col(b).allFinite()) z.col(b) = single.col(b).cast<double>();
  }
  summary.full = double_solver.Solve(double_map, z);
  return summary;
}

}  // namespace implicit
