// The active set's property check (issue 10): a solve that evaluates only the
// samples still iterating gives the same iterates as one that evaluates the
// whole batch every time.
//
//   CheckActiveSetMatchesWholeBatch(map, z0, {"picard", "anderson"})
//       each solver from z0 on map and on WholeBatchMap(map): the same
//       iterates (1e-12) and per-sample iteration counts, fewer columns
#pragma once

#include <implicit/core/map.h>
#include <implicit/solvers/registry.h>

#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

namespace implicit {
namespace testing {

// The same map, but evaluated on the whole batch every time.
template <typename Scalar>
class WholeBatchMap : public FixedPointMap<Scalar> {
 public:
  explicit WholeBatchMap(const FixedPointMap<Scalar>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    inner_.Evaluate(z, out);
  }
  const Energy<Scalar>* energy() const override { return inner_.energy(); }
  void EvaluateWithEnergy(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out,
                          VectorRef<Scalar> e) const override {
    inner_.EvaluateWithEnergy(z, out, e);
  }
  bool SupportsSubsets() const override { return false; }
  bool HasJacobianProducts() const override { return inner_.HasJacobianProducts(); }
  bool HasSymmetricJacobian() const override { return inner_.HasSymmetricJacobian(); }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    inner_.JacobianVectorProduct(z, v, out);
  }

 private:
  const FixedPointMap<Scalar>& inner_;
};

// Solves from z0 with each solver (by registry name), once with the active set
// and once with the map evaluated on the whole batch: the same iterates, fewer
// columns.
template <typename Scalar>
void CheckActiveSetMatchesWholeBatch(const FixedPointMap<Scalar>& map, const Matrix<Scalar>& z0,
                                     const std::vector<std::string>& solvers, int max_iterations = 300) {
  BOOST_REQUIRE(map.SupportsColumnSubsets());
  WholeBatchMap<Scalar> whole(map);
  const Index B = z0.cols();
  for (const std::string& name : solvers) {
    BOOST_TEST_CONTEXT(name) {
      SolverOptions common;
      common.max_iterations = max_iterations;
      common.absolute_tolerance = 1e-10;
      Matrix<Scalar> za = z0, zw = z0;
      const Summary active = MakeSolver<Scalar>(name, {}, common)->Solve(map, za);
      const Summary full = MakeSolver<Scalar>(name, {}, common)->Solve(whole, zw);
      BOOST_TEST(active.IsConverged());
      BOOST_TEST(full.IsConverged());
      BOOST_TEST((za - zw).cwiseAbs().maxCoeff() <= 1e-12);
      for (Index b = 0; b < B; ++b) {
        BOOST_TEST(active.sample_iterations[b] == full.sample_iterations[b]);
        BOOST_TEST(active.sample_evaluations[b] <= full.sample_evaluations[b]);
      }
      // Only the active columns were evaluated: fewer columns in all.
      BOOST_TEST(active.total_sample_evaluations() <
                 static_cast<long long>(full.function_evaluations) * B);
      BOOST_TEST(full.total_sample_evaluations() ==
                 static_cast<long long>(full.function_evaluations) * B);
    }
  }
}

}  // namespace testing
}  // namespace implicit
