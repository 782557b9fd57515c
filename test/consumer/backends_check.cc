// Links the optional solver-backend components (find_package(implicit
// COMPONENTS kinsol petsc), implicit::kinsol and implicit::petsc), registers
// them and solves a small affine fixed point f(z) = A z + c with every
// backend solver this package has; fails unless each converges.
#include <implicit/solvers/kinsol.h>
#include <implicit/solvers/petsc.h>
#include <implicit/solvers/registry.h>

#include <iostream>
#include <string>

namespace {
class Affine : public implicit::FixedPointMap<double> {  // f(z) = z / 2 + 1, fixed point 2
 public:
  implicit::Index dimension() const override { return 3; }
  void Evaluate(implicit::ConstMatrixRef<double> z, implicit::MatrixRef<double> out) const override {
    out = (z.array() / 2 + 1).matrix();
  }
};
}  // namespace

int main() {
  implicit::kinsol::RegisterSolvers();
  implicit::petsc::RegisterSolvers();
  int failures = 0;
  for (const std::string& name : implicit::SolverNames()) {
    if (implicit::SolverLibrary(name) == "libimplicit") continue;
    implicit::Matrix<double> z = implicit::Matrix<double>::Zero(3, 2);
    const implicit::Summary s = implicit::MakeSolver<double>(name)->Solve(Affine(), z);
    const bool ok = s.IsConverged() && (z.array() - 2).abs().maxCoeff() < 1e-7;
    failures += ok ? 0 : 1;
    std::cout << name << " (" << implicit::SolverLibrary(name) << "): " << s.BriefReport() << "\n";
  }
  std::string why;
  if (!implicit::kinsol::Available(&why)) std::cout << "implicit::kinsol: " << why << "\n";
  if (!implicit::petsc::Available(&why)) std::cout << "implicit::petsc: " << why << "\n";
  return failures == 0 ? 0 : 1;
}
