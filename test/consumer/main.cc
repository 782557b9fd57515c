// Solves a small batched fixed-point problem through the installed package and
// exits non-zero unless it converged to a true fixed point.
#include <implicit/core/energy_maps.h>
#include <implicit/solvers/picard.h>

#include <cstdio>

namespace {
class HalfMap : public implicit::FixedPointMap<double> {  // f(z) = z/2 + 1, z* = 2
 public:
  implicit::Index dimension() const override { return 3; }
  void Evaluate(implicit::ConstMatrixRef<double> z, implicit::MatrixRef<double> out) const override {
    out = (0.5 * z.array() + 1.0).matrix();
  }
};
}  // namespace

int main() {
  HalfMap map;
  implicit::Matrix<double> z = implicit::Matrix<double>::Zero(3, 4);
  implicit::PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-12;
  const implicit::Summary summary = implicit::PicardSolver<double>(options).Solve(map, z);
  std::printf("%s\n", summary.BriefReport().c_str());
  const double error = (z.array() - 2.0).abs().maxCoeff();
  return summary.IsConverged() && error < 1e-11 ? 0 : 1;
}
