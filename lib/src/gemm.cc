// internal::Gemm (gemm.h), compiled once for float and double.
#include <implicit/core/gemm.h>

#include <stdexcept>
#include <string>

namespace implicit {
namespace internal {

template <typename Number>
void Gemm(Number alpha, const GemmOperand<Number>& a, const GemmOperand<Number>& b, Number beta,
          Number* c, Index c_stride) {
  if (a.op_cols() != b.op_rows()) {
    throw std::invalid_argument("internal::Gemm: a " + std::to_string(a.op_rows()) + "x" +
                                std::to_string(a.op_cols()) + " times b " + std::to_string(b.op_rows()) +
                                "x" + std::to_string(b.op_cols()));
  }
  using Map = Eigen::Map<const Matrix<Number>, 0, Eigen::OuterStride<>>;
  const Index m = a.op_rows(), n = b.op_cols();
  if (m == 0 || n == 0) return;
  Eigen::Map<Matrix<Number>, 0, Eigen::OuterStride<>> out(c, m, n, Eigen::OuterStride<>(c_stride));
  if (beta == Number(0)) {
    out.setZero();
  } else if (beta != Number(1)) {
    out *= beta;
  }
  if (a.op_cols() == 0) return;
  const Map A(a.data, a.rows, a.cols, Eigen::OuterStride<>(a.stride));
  const Map B(b.data, b.rows, b.cols, Eigen::OuterStride<>(b.stride));
  if (a.transposed) {
    if (b.transposed) {
      out.noalias() += alpha * (A.transpose() * B.transpose());
    } else {
      out.noalias() += alpha * (A.transpose() * B);
    }
  } else if (b.transposed) {
    out.noalias() += alpha * (A * B.transpose());
  } else {
    out.noalias() += alpha * (A * B);
  }
}

template void Gemm<float>(float, const GemmOperand<float>&, const GemmOperand<float>&, float, float*, Index);
template void Gemm<double>(double, const GemmOperand<double>&, const GemmOperand<double>&, double, double*,
                           Index);

}  // namespace internal
}  // namespace implicit
