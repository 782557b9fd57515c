/// \file
/// Matrix products at the CPU's best level. GemmInto(c, a, transpose_a, b):
/// c = beta c + alpha op(a) b on Eigen matrices of float or double, run by the
/// library's GEMM compiled for each x86-64 level and chosen at run time
/// (cpu_dispatch.h), so a default build (no -march) multiplies with AVX2 or
/// AVX-512 where the CPU has them. The attention energies' large products use
/// it, and so can a map or energy of your own. internal::Gemm is the same on
/// raw column-major operands (the reverse tape's recorded products), so such
/// code instantiates no Eigen product kernel of its own.
///
/// \code
///   implicit::GemmInto<double>(scores, X, /*transpose_a=*/true, z);   // scores = X^T z
///   implicit::GemmInto<double>(out, X, false, p, -1.0, 1.0);          // out -= X p
///   implicit::internal::GemmOperand<double> a{x.data(), n, N, n, /*transposed=*/true};
///   implicit::internal::Gemm<double>(1.0, a, b, 0.0, out.data(), N);   // out = x^T b
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <type_traits>

namespace implicit {
namespace internal {

/// A column-major matrix of `rows` x `cols` numbers at data[i + j * stride]
/// (stride >= rows), used as itself or, when `transposed`, as its transpose.
template <typename Number>
struct GemmOperand {
  const Number* data = nullptr;
  Index rows = 0, cols = 0, stride = 0;
  bool transposed = false;
  /// The size of op(this).
  Index op_rows() const { return transposed ? cols : rows; }
  Index op_cols() const { return transposed ? rows : cols; }
};

/// c[i + j * c_stride] (op(a).rows() x op(b).cols()) = beta c + alpha op(a) op(b);
/// beta = 0 overwrites c (whatever it held). Throws std::invalid_argument
/// when op(a).cols() != op(b).rows(). Number is float or double.
template <typename Number>
void Gemm(Number alpha, const GemmOperand<Number>& a, const GemmOperand<Number>& b, Number beta,
          Number* c, Index c_stride);

extern template void Gemm<float>(float, const GemmOperand<float>&, const GemmOperand<float>&, float,
                                 float*, Index);
extern template void Gemm<double>(double, const GemmOperand<double>&, const GemmOperand<double>&,
                                  double, double*, Index);

}  // namespace internal

namespace internal {

/// c = beta c + alpha op(a) op(b), op(m) = m^T when its flag is set: GemmInto
/// with b transposable too (the products of the layers' per-sample caches,
/// whose operands are row blocks of stacked heads). Same rules as GemmInto.
template <typename Scalar>
void GemmOpInto(MatrixRef<Scalar> c, ConstMatrixRef<Scalar> a, bool transpose_a, ConstMatrixRef<Scalar> b,
                bool transpose_b, Scalar alpha = Scalar(1), Scalar beta = Scalar(0)) {
  if constexpr (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) {
    using Operand = GemmOperand<Scalar>;
    const Operand A{a.data(), a.rows(), a.cols(), a.outerStride(), transpose_a};
    const Operand B{b.data(), b.rows(), b.cols(), b.outerStride(), transpose_b};
    CheckShape("GemmInto(c)", c, A.op_rows(), B.op_cols());
    Gemm<Scalar>(alpha, A, B, beta, c.data(), c.outerStride());
  } else {
    CheckShape("GemmInto(c)", c, transpose_a ? a.cols() : a.rows(), transpose_b ? b.rows() : b.cols());
    if (beta == Scalar(0)) {
      c.setZero();
    } else if (beta != Scalar(1)) {
      c *= beta;
    }
    if (transpose_a && transpose_b) {
      c.noalias() += alpha * (a.transpose() * b.transpose());
    } else if (transpose_a) {
      c.noalias() += alpha * (a.transpose() * b);
    } else if (transpose_b) {
      c.noalias() += alpha * (a * b.transpose());
    } else {
      c.noalias() += alpha * (a * b);
    }
  }
}

}  // namespace internal

/// c = beta c + alpha op(a) b, op(a) = a^T when transpose_a, on Eigen matrices
/// or views (columns contiguous); c must not alias a or b (as Eigen's
/// noalias()). float and double run internal::Gemm at the CPU's best level
/// (`c.noalias() = a * b` in your own code runs what your flags allow); other
/// scalar types Eigen's product.
/// \throws std::invalid_argument when the shapes do not match (c: op(a).rows() x b.cols()).
template <typename Scalar>
void GemmInto(MatrixRef<Scalar> c, ConstMatrixRef<Scalar> a, bool transpose_a, ConstMatrixRef<Scalar> b,
              Scalar alpha = Scalar(1), Scalar beta = Scalar(0)) {
  internal::GemmOpInto<Scalar>(c, a, transpose_a, b, /*transpose_b=*/false, alpha, beta);
}

}  // namespace implicit
