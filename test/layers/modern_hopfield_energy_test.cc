// ModernHopfieldEnergy's own header (modern_hopfield_energy.h) stands alone:
// it includes no solver and no implicit differentiation, yet its CCCP update
// retrieves a stored pattern. The plain classes declared below would clash with
// the class templates PicardSolver, Solver and ImplicitLayer, so this file
// stops compiling if the header ever pulls in implicit/solvers or implicit/diff.
#define BOOST_TEST_MODULE modern_hopfield_energy
#include <boost/test/unit_test.hpp>

#include <implicit/layers/modern_hopfield_energy.h>

#include <random>

namespace implicit {
class PicardSolver {};
class Solver {};
class ImplicitLayer {};
}  // namespace implicit

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

BOOST_AUTO_TEST_CASE(cccp_steps_retrieve_a_stored_pattern_without_a_solver) {
  const Index n = 16, N = 4, B = 3;
  std::mt19937 gen(7);
  std::normal_distribution<double> dist(0.0, 1.0);
  Matrix<double> X(n, N);
  for (Index j = 0; j < N; ++j) {
    for (Index i = 0; i < n; ++i) X(i, j) = dist(gen);
    X.col(j).normalize();
  }
  implicit::ModernHopfieldEnergy<double>::Options o;
  o.beta = 16.0;
  implicit::ModernHopfieldEnergy<double> energy(X, o);

  // Probes: patterns 0, 1, 2 plus noise.
  Matrix<double> xi(n, B), next(n, B);
  for (Index b = 0; b < B; ++b) {
    for (Index i = 0; i < n; ++i) xi(i, b) = X(i, b) + 0.1 * dist(gen);
  }
  Vector<double> e(B), e_next(B);
  energy.Value(xi, e);
  for (int t = 0; t < 50; ++t) {
    energy.CccpUpdate(xi, next);
    energy.Value(next, e_next);
    for (Index b = 0; b < B; ++b) BOOST_CHECK_LE(e_next(b), e(b) + 1e-12);  // CCCP descends
    xi = next;
    e = e_next;
  }
  for (Index b = 0; b < B; ++b) {
    BOOST_CHECK_GT(xi.col(b).dot(X.col(b)) / xi.col(b).norm(), 0.99);
  }
}
