// Matrix products as plain loops over coefficients, for the reference energies
// and blocks that the tests write as functors templated on the scalar type T
// (evaluated by AutoDiffEnergy / ExplicitBlockMap in ceres::Jet scalars).
//
//   Vector<T> y = MatVec(A, x);   y_i  = sum_j A_ij x_j
//   Matrix<T> C = MatMul(A, B);   C_ij = sum_k A_ik B_kj
//
// A, x, B may be any Eigen expression (a Map, a block, a column, a transpose,
// a cast<T>()) whose scalar is T. Eigen's operator* on Jet scalars would
// instantiate its general matrix-matrix / matrix-vector kernels
// (GeneralBlockPanelKernel, GeneralMatrixVector) once per dual type, which
// costs minutes of compile time per test (far more under the sanitizers) for
// the same sums. core/autodiff_energy_test.cc keeps one Eigen product on
// purpose, to cover that usage.
#pragma once

#include <implicit/core/types.h>

#include <Eigen/Core>

#include <type_traits>

namespace implicit {
namespace testing {

template <typename DerivedA, typename DerivedX>
Vector<typename DerivedX::Scalar> MatVec(const Eigen::MatrixBase<DerivedA>& A,
                                         const Eigen::MatrixBase<DerivedX>& x) {
  using T = typename DerivedX::Scalar;
  static_assert(std::is_same<typename DerivedA::Scalar, T>::value,
                "MatVec: A and x must have the same scalar type (use cast<T>())");
  eigen_assert(x.cols() == 1 && A.cols() == x.rows());
  Vector<T> y(A.rows());
  for (Index i = 0; i < A.rows(); ++i) {
    T acc(0);
    for (Index j = 0; j < A.cols(); ++j) acc += A(i, j) * x(j, 0);
    y(i) = acc;
  }
  return y;
}

template <typename DerivedA, typename DerivedB>
Matrix<typename DerivedB::Scalar> MatMul(const Eigen::MatrixBase<DerivedA>& A,
                                         const Eigen::MatrixBase<DerivedB>& B) {
  Matrix<typename DerivedB::Scalar> C(A.rows(), B.cols());
  for (Index j = 0; j < B.cols(); ++j) C.col(j) = MatVec(A, B.col(j));
  return C;
}

}  // namespace testing
}  // namespace implicit
