// libFuzzer harness: the run-time solver option parser (ParseOptionList and
// MakeSolver, solvers/src/registry.cc), over libimplicit's solvers and the
// KINSOL backend's when the build has it (kinsol-*, registered after the
// built-in ones, so bytes 0-5 keep naming the built-in solvers; PETSc's are
// left out: it would start MPI in the fuzzer). The first byte picks a solver, the
// rest is an option list such as "memory=5,mixing=0.5". Any text must either
// be rejected with std::invalid_argument or give a solver; a solver built
// from accepted options must then run on a small contractive problem without
// crashing and report a finite residual or an honest failure status.
#include "fuzz_check.h"

#include <implicit/core/energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/solvers/kinsol.h>
#include <implicit/solvers/registry.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// E(z) = |z - c|^2 / 4 + |z|^2 / 8, a strictly convex quadratic (Hessian 0.75 I)
// whose gradient step with step 1 is the contraction z <- z / 4 + c / 2, so
// every solver, energy-based or not, can run on it.
class QuadraticEnergy : public implicit::Energy<double> {
 public:
  implicit::Index dimension() const override { return 3; }
  void Value(implicit::ConstMatrixRef<double> x, implicit::VectorRef<double> values) const override {
    values = 0.25 * (x.colwise() - Center()).colwise().squaredNorm().transpose() +
             0.125 * x.colwise().squaredNorm().transpose();
  }
  void Gradient(implicit::ConstMatrixRef<double> x, implicit::MatrixRef<double> grad) const override {
    grad = 0.5 * (x.colwise() - Center()) + 0.25 * x;
  }
  void HessianVectorProduct(implicit::ConstMatrixRef<double>, implicit::ConstMatrixRef<double> v,
                            implicit::MatrixRef<double> out) const override {
    out = 0.75 * v;
  }

 private:
  static implicit::Vector<double> Center() { return implicit::Vector<double>::LinSpaced(3, -1, 1); }
};

// Iteration limits above this are accepted by the parser but not run here:
// with zero tolerances they would only make the harness slow, not test more.
constexpr long kMaxIterationsToRun = 2000;

bool CheapToRun(const std::map<std::string, std::string>& options) {
  const auto it = options.find("max_iterations");
  if (it == options.end()) return true;
  return std::strtol(it->second.c_str(), nullptr, 10) <= kMaxIterationsToRun;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using implicit_fuzz::Check;
  if (size == 0) return 0;
  static const std::vector<std::string> names = [] {
    implicit::kinsol::RegisterSolvers();
    return implicit::SolverNames();
  }();
  const std::string& name = names[data[0] % names.size()];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::map<std::string, std::string> options;
  std::unique_ptr<implicit::Solver<double>> solver;
  try {
    options = implicit::ParseOptionList(text);
    solver = implicit::MakeSolver<double>(name, options);
    implicit::MakeSolver<float>(name, options);
  } catch (const std::invalid_argument&) {
    return 0;  // rejected: the documented outcome for a bad option list
  }
  Check(solver != nullptr, "an accepted option list gives a solver");
  if (!CheapToRun(options)) return 0;
  static const QuadraticEnergy energy;
  static const implicit::GradientStepMap<double> map(energy, 1.0);
  implicit::Matrix<double> z = implicit::Matrix<double>::Zero(3, 2);
  const implicit::Summary summary = solver->Solve(map, z);
  Check(summary.sample_status.size() == 2, "one status per sample");
  if (summary.IsConverged()) Check(z.allFinite(), "a converged solve returns finite states");
  return 0;
}
