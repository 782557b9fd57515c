// The README's user energy (modern Hopfield retrieval written once as a
// functor in plain Eigen) through the installed package: its equilibria by
// Picard, and its gradient and Hessian-vector product in reverse mode (the
// product recorded as one block, reverse_eigen.h) equal to forward mode's.
// Exits non-zero otherwise.
#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/solvers/picard.h>

#include <cmath>
#include <cstdio>

struct Retrieval {
  implicit::Matrix<double> X;  // stored patterns, n x N
  double beta;
  template <typename T>
  T operator()(const implicit::Vector<T>& x, const implicit::Vector<T>&) const {
    const implicit::Vector<T> s = beta * (X.transpose() * x);   // one tape block in reverse mode
    const T m = s.maxCoeff();                                   // max-shifted log-sum-exp
    using std::log;
    return 0.5 * x.squaredNorm() - (m + log((s.array() - m).exp().sum())) / beta;
  }
};

int main() {
  const implicit::Index n = 80, N = 5, B = 3;
  const implicit::Matrix<double> X = implicit::Matrix<double>::Random(n, N) / 3.0;
  implicit::AutoDiffEnergy<Retrieval, double> energy(Retrieval{X, 2.0}, n);
  implicit::CccpMap<double> map(energy);
  const implicit::Matrix<double> start = implicit::Matrix<double>::Random(n, B) / 3.0;
  implicit::Matrix<double> z = start;
  implicit::PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-10;
  const implicit::Summary summary = implicit::PicardSolver<double>(options).Solve(map, z);
  std::printf("user energy (%s mode): %s\n", energy.uses_reverse_mode() ? "reverse" : "forward",
              summary.BriefReport().c_str());
  if (!summary.IsConverged()) return 1;

  // The products at the starting points (the gradient vanishes at z).
  const implicit::Matrix<double> v = implicit::Matrix<double>::Random(n, B);
  implicit::Matrix<double> g_auto(n, B), g_forward(n, B), h_auto(n, B), h_forward(n, B);
  energy.Gradient(start, g_auto);
  energy.HessianVectorProduct(start, v, h_auto);
  energy.set_mode(implicit::AutoDiffMode::kForward);
  energy.Gradient(start, g_forward);
  energy.HessianVectorProduct(start, v, h_forward);
  const double dg = (g_auto - g_forward).norm(), dh = (h_auto - h_forward).norm();
  std::printf("reverse vs forward: gradient %.1e (|g| %.1e), Hessian-vector product %.1e\n", dg,
              g_forward.norm(), dh);
  return dg < 1e-10 * (1 + g_forward.norm()) && dh < 1e-10 * (1 + h_forward.norm()) ? 0 : 1;
}
