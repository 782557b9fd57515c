// The modern Hopfield energy's hot paths (Value, Gradient, CccpUpdate,
// CccpUpdateAndValue, GradientAndValue, HessianVectorProduct, Attention) do
// not allocate (Eigen) heap memory once a call has sized the per-thread
// scratch: repeated calls with the same or a smaller batch run allocation-free.
//
// Method (support/no_malloc_guard.h): every Eigen heap allocation is checked
// and a forbidden one throws, in Release builds too. The batches are small
// enough for Eigen's products to keep their packing buffers on the stack.
#include "support/no_malloc_guard.h"

#define BOOST_TEST_MODULE layers_no_allocation
#include <boost/test/unit_test.hpp>

#include <implicit/layers/modern_hopfield_energy.h>

#include "support/test_problems.h"

#include <limits>
#include <tuple>
#include <vector>

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::RandomMatrix;
using implicit_no_malloc_test::EigenAssertion;

namespace {

// Every hot-path evaluation on the first `b` samples.
template <typename S>
void EvaluateAll(const implicit::ModernHopfieldEnergy<S>& energy, const Matrix<S>& xi,
                 const Matrix<S>& v, Matrix<S>& out, Vector<S>& values, Matrix<S>& p, Index b) {
  const auto x = xi.leftCols(b);
  auto o = out.leftCols(b);
  auto e = values.head(b);
  energy.Value(x, e);
  energy.Gradient(x, o);
  energy.CccpUpdate(x, o);
  energy.CccpUpdateAndValue(x, o, e);
  energy.GradientAndValue(x, o, e);
  energy.HessianVectorProduct(x, v.leftCols(b), o);
  energy.Attention(x, p.leftCols(b));
}

}  // namespace

using Scalars = std::tuple<float, double>;

BOOST_AUTO_TEST_CASE_TEMPLATE(hopfield_hot_paths_do_not_allocate, S, Scalars) {
  const S inf = std::numeric_limits<S>::infinity();
  // Small (coefficient-based products) and medium (blocked GEMM, buffers on the stack).
  for (const auto& size : {std::vector<Index>{6, 9, 8}, std::vector<Index>{16, 40, 24}}) {
    const Index n = size[0], N = size[1], B = size[2];
    typename implicit::ModernHopfieldEnergy<S>::Options o;
    o.beta = 2.0;
    o.learn_patterns = true;
    implicit::ModernHopfieldEnergy<S> energy(RandomMatrix<S>(n, N, 1), o);
    const Matrix<S> xi = RandomMatrix<S>(n, B, 2), v = RandomMatrix<S>(n, B, 3);
    Matrix<S> out(n, B), p(N, B);
    Vector<S> values(B);
    Matrix<S> shared = Matrix<S>::Zero(N, 1), per_sample = Matrix<S>::Zero(N, B);
    shared(1, 0) = -inf;
    per_sample(2, 3) = -inf;
    for (const Matrix<S>& mask : {Matrix<S>(), shared, per_sample}) {
      BOOST_TEST_CONTEXT("n " << n << ", mask " << mask.rows() << "x" << mask.cols()) {
        energy.SetMask(mask);
        EvaluateAll(energy, xi, v, out, values, p, B);  // sizes the scratch
        Eigen::internal::set_is_malloc_allowed(false);
        try {
          EvaluateAll(energy, xi, v, out, values, p, B);
          // A per-sample mask fixes the batch size; otherwise any smaller batch.
          if (mask.cols() <= 1) EvaluateAll(energy, xi, v, out, values, p, B - 3);
          Eigen::internal::set_is_malloc_allowed(true);
        } catch (const EigenAssertion& e) {
          Eigen::internal::set_is_malloc_allowed(true);
          BOOST_ERROR("allocation in the hot path: " << e.what());
        }
        BOOST_TEST(out.allFinite());
      }
    }
  }
}
