/// \file
/// internal::MatrixProduct: the product of two matrices of numbers or of dual
/// numbers (ceres::Jet, nested or not) computed as products of numbers, which
/// Eigen vectorises. The reverse-mode tape's matrix-product blocks
/// (reverse_tape.h) and ad::Product (ad_functions.h) use it, so that the
/// second-order recording and forward mode multiply at the speed of numbers.
///
/// \code
///   implicit::Matrix<ceres::Jet<double, 8>> s;
///   implicit::internal::MatrixProduct(a, b, &s);   // s = a b
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <type_traits>

namespace implicit {
namespace internal {

/// Whether V is a dual number (ceres::Jet<P, N>, or a type derived from one),
/// over numbers or over duals (P is then a dual itself).
template <typename V, typename = void>
struct IsDual : std::false_type {};
template <typename V>
struct IsDual<V, std::void_t<decltype(V::DIMENSION), decltype(V::a)>> : std::true_type {};

/// Whether every part of x (its value and tangents, nested or not) is zero.
template <typename V>
bool IsAllZero(const V& x) {
  if constexpr (IsDual<V>::value) {
    if (!IsAllZero(x.a)) return false;
    for (int t = 0; t < V::DIMENSION; ++t) {
      if (!IsAllZero(x.v[t])) return false;
    }
    return true;
  } else {
    return x == V(0);
  }
}

/// x as a dual of type V: itself, or a number as a constant (zero tangents).
template <typename V, typename X>
V AsDual(const X& x) {
  if constexpr (std::is_arithmetic<X>::value) {
    return V(std::decay_t<decltype(V::a)>(x));
  } else {
    return x;
  }
}

/// *out = a b for matrices of numbers (Eigen's product) or of duals (either
/// factor may hold numbers, constants of the dual type): then
/// products of their parts, down to products of numbers, which Eigen
/// vectorises (a product of Jets it computes element by element, several times
/// slower). The values are a.a b.a; the tangents a.v_k b.a + a.a b.v_k, for
/// one tangent one product [a.v | a.a] [b.a; b.v], for several two: the a.v_k
/// stacked as rows times b.a, and a.a times the b.v_k side by side.
template <typename V, typename A, typename B>
void MatrixProduct(const A& a, const B& b, Matrix<V>* out) {
  if constexpr (IsDual<V>::value) {
    using Part = std::decay_t<decltype(V::a)>;
    constexpr int K = V::DIMENSION;
    const Index m = a.rows(), k = a.cols(), n = b.cols();
    out->resize(m, n);
    Matrix<Part> value;
    if constexpr (K == 1) {
      // A factor whose tangents are all zero (data, or parameters in a
      // recording along x) leaves its half out of the tangent's product.
      Matrix<Part> a_parts(m, 2 * k), b_parts(2 * k, n), tangent;  // [a.v | a.a], [b.a; b.v]
      bool a_tangent = false, b_tangent = false;
      for (Index j = 0; j < k; ++j) {
        for (Index i = 0; i < m; ++i) {
          const V x = AsDual<V>(a(i, j));
          a_parts(i, j) = x.v[0];
          a_parts(i, k + j) = x.a;
          a_tangent = a_tangent || !IsAllZero(x.v[0]);
        }
      }
      for (Index j = 0; j < n; ++j) {
        for (Index i = 0; i < k; ++i) {
          const V x = AsDual<V>(b(i, j));
          b_parts(i, j) = x.a;
          b_parts(k + i, j) = x.v[0];
          b_tangent = b_tangent || !IsAllZero(x.v[0]);
        }
      }
      MatrixProduct(a_parts.rightCols(k), b_parts.topRows(k), &value);
      if (a_tangent && b_tangent) {
        MatrixProduct(a_parts, b_parts, &tangent);
      } else if (a_tangent) {
        MatrixProduct(a_parts.leftCols(k), b_parts.topRows(k), &tangent);
      } else if (b_tangent) {
        MatrixProduct(a_parts.rightCols(k), b_parts.bottomRows(k), &tangent);
      } else {
        tangent.setZero(m, n);
      }
      for (Index i = 0; i < m * n; ++i) {
        (*out)(i).a = value(i);
        (*out)(i).v[0] = tangent(i);
      }
    } else {
      Matrix<Part> a_value(m, k), a_tangents(K * m, k), b_value(k, n), b_tangents(k, K * n), left, right;
      bool a_tangent = false, b_tangent = false;
      for (Index j = 0; j < k; ++j) {
        for (Index i = 0; i < m; ++i) {
          const V x = AsDual<V>(a(i, j));
          a_value(i, j) = x.a;
          for (int t = 0; t < K; ++t) {
            a_tangents(t * m + i, j) = x.v[t];
            a_tangent = a_tangent || !IsAllZero(x.v[t]);
          }
        }
      }
      for (Index j = 0; j < n; ++j) {
        for (Index i = 0; i < k; ++i) {
          const V x = AsDual<V>(b(i, j));
          b_value(i, j) = x.a;
          for (int t = 0; t < K; ++t) {
            b_tangents(i, t * n + j) = x.v[t];
            b_tangent = b_tangent || !IsAllZero(x.v[t]);
          }
        }
      }
      // As above, a factor without tangents leaves its product out.
      MatrixProduct(a_value, b_value, &value);
      if (a_tangent) {
        MatrixProduct(a_tangents, b_value, &left);  // K m x n
      } else {
        left.setZero(K * m, n);
      }
      if (b_tangent) {
        MatrixProduct(a_value, b_tangents, &right);  // m x K n
      } else {
        right.setZero(m, K * n);
      }
      for (Index j = 0; j < n; ++j) {
        for (Index i = 0; i < m; ++i) {
          V& y = (*out)(i, j);
          y.a = value(i, j);
          for (int t = 0; t < K; ++t) y.v[t] = left(t * m + i, j) + right(i, t * n + j);
        }
      }
    }
  } else {
    out->noalias() = a * b;
  }
}

}  // namespace internal
}  // namespace implicit
