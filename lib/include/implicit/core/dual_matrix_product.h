// internal::MatrixProduct: the product of two matrices of numbers or of dual
// numbers (ceres::Jet, nested or not) computed as products of numbers, which
// Eigen vectorises. The reverse-mode tape's matrix-product blocks
// (reverse_tape.h) and ad::Product (ad_functions.h) use it, so that the
// second-order recording and forward mode multiply at the speed of numbers.
//
//   implicit::Matrix<ceres::Jet<double, 8>> s;
//   implicit::internal::MatrixProduct(a, b, &s);   // s = a b
#pragma once

#include <implicit/core/types.h>

#include <type_traits>

namespace implicit {
namespace internal {

// Whether V is a dual number (ceres::Jet<P, N>, or a type derived from one),
// over numbers or over duals (P is then a dual itself).
template <typename V, typename = void>
struct IsDual : std::false_type {};
template <typename V>
struct IsDual<V, std::void_t<decltype(V::DIMENSION), decltype(V::a)>> : std::true_type {};

// *out = a b for matrices of numbers (Eigen's product) or of duals: then the
// value parts' product and, per tangent k, a.v_k b.a + a.a b.v_k, down to
// products of numbers, which Eigen vectorises (a product of Jets it computes
// element by element, several times slower).
template <typename V, typename A, typename B>
void MatrixProduct(const A& a, const B& b, Matrix<V>* out) {
  if constexpr (IsDual<V>::value) {
    using Part = std::decay_t<decltype(V::a)>;
    const Matrix<Part> a_value = a.unaryExpr([](const V& x) { return Part(x.a); });
    const Matrix<Part> b_value = b.unaryExpr([](const V& x) { return Part(x.a); });
    Matrix<Part> value, left, right;
    MatrixProduct(a_value, b_value, &value);
    out->resize(a.rows(), b.cols());
    for (Index i = 0; i < value.size(); ++i) (*out)(i).a = value(i);
    for (int k = 0; k < V::DIMENSION; ++k) {
      MatrixProduct(Matrix<Part>(a.unaryExpr([k](const V& x) { return Part(x.v[k]); })), b_value, &left);
      MatrixProduct(a_value, Matrix<Part>(b.unaryExpr([k](const V& x) { return Part(x.v[k]); })), &right);
      for (Index i = 0; i < left.size(); ++i) (*out)(i).v[k] = left(i) + right(i);
    }
  } else {
    out->noalias() = a * b;
  }
}

}  // namespace internal
}  // namespace implicit
