// internal::Gemm: C = beta C + alpha op(A) op(B) on column-major numbers
// (float or double), compiled in the library with Eigen's matrix product for
// each CPU level and run at the level chosen at run time (cpu_dispatch.h).
// Code that only needs a product of plain numbers (the reverse tape's recorded
// products) does not instantiate Eigen's product kernels in every translation
// unit, and the attention energies' large products (GemmInto) run with AVX2 or
// AVX-512 where the CPU has them, whatever the build's flags.
//
//   implicit::internal::GemmOperand<double> a{x.data(), n, N, n, /*transposed=*/true};
//   implicit::internal::Gemm<double>(1.0, a, b, 0.0, out.data(), N);   // out = x^T b
//   implicit::internal::GemmInto<double>(out, x, /*transpose_a=*/true, b);  // the same on Eigen objects
#pragma once

#include <implicit/core/types.h>

#include <type_traits>

namespace implicit {
namespace internal {

// A column-major matrix of `rows` x `cols` numbers at data[i + j * stride]
// (stride >= rows), used as itself or, when `transposed`, as its transpose.
template <typename Number>
struct GemmOperand {
  const Number* data = nullptr;
  Index rows = 0, cols = 0, stride = 0;
  bool transposed = false;
  // The size of op(this).
  Index op_rows() const { return transposed ? cols : rows; }
  Index op_cols() const { return transposed ? rows : cols; }
};

// c[i + j * c_stride] (op(a).rows() x op(b).cols()) = beta c + alpha op(a) op(b);
// beta = 0 overwrites c (whatever it held). Throws std::invalid_argument
// when op(a).cols() != op(b).rows(). Number is float or double.
template <typename Number>
void Gemm(Number alpha, const GemmOperand<Number>& a, const GemmOperand<Number>& b, Number beta,
          Number* c, Index c_stride);

extern template void Gemm<float>(float, const GemmOperand<float>&, const GemmOperand<float>&, float,
                                 float*, Index);
extern template void Gemm<double>(double, const GemmOperand<double>&, const GemmOperand<double>&,
                                  double, double*, Index);

// c = beta c + alpha op(a) b, op(a) = a^T when transpose_a, on Eigen matrices
// or views (columns contiguous); c must not alias a or b (as Eigen's
// noalias()). float and double run internal::Gemm; other scalar types Eigen's
// own product.
template <typename Scalar>
void GemmInto(MatrixRef<Scalar> c, ConstMatrixRef<Scalar> a, bool transpose_a, ConstMatrixRef<Scalar> b,
              Scalar alpha = Scalar(1), Scalar beta = Scalar(0)) {
  if constexpr (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) {
    const Index rows = transpose_a ? a.cols() : a.rows();
    CheckShape("internal::GemmInto(c)", c, rows, b.cols());
    Gemm<Scalar>(alpha, GemmOperand<Scalar>{a.data(), a.rows(), a.cols(), a.outerStride(), transpose_a},
                 GemmOperand<Scalar>{b.data(), b.rows(), b.cols(), b.outerStride(), false}, beta, c.data(),
                 c.outerStride());
  } else {
    if (beta == Scalar(0)) {
      c.setZero();
    } else if (beta != Scalar(1)) {
      c *= beta;
    }
    if (transpose_a) {
      c.noalias() += alpha * (a.transpose() * b);
    } else {
      c.noalias() += alpha * (a * b);
    }
  }
}

}  // namespace internal
}  // namespace implicit
