// internal::Gemm: C = beta C + alpha op(A) op(B) on column-major numbers
// (float or double), compiled once in the library (lib/src/gemm.cc) with
// Eigen's matrix product, so that code which only needs a product of plain
// numbers (the reverse tape's recorded products, reverse_products.h) does not
// instantiate Eigen's product kernels in every translation unit.
//
//   implicit::internal::GemmOperand<double> a{x.data(), n, N, n, /*transposed=*/true};
//   implicit::internal::Gemm<double>(1.0, a, b, 0.0, out.data(), N);   // out = x^T b
#pragma once

#include <implicit/core/types.h>

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

}  // namespace internal
}  // namespace implicit
