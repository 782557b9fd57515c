#define BOOST_TEST_MODULE picard
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/picard.h>

#include "support/test_problems.h"

using namespace implicit;

BOOST_AUTO_TEST_CASE(picard_solves_affine_contraction) {
  const Index n = 8, B = 4;
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(n, n, 0.5, 1),
                                 testing::RandomMatrix<double>(n, 1, 2));
  Matrix<double> z = Matrix<double>::Zero(n, B);
  PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-12;
  Summary s = PicardSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.IsConverged());
  for (Index b = 0; b < B; ++b) BOOST_TEST((z.col(b) - map.Solution()).norm() <= 1e-11);
}
