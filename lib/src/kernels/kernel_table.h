// The table of CPU kernels one instruction-set level provides (see
// lib/include/implicit/core/cpu_dispatch.h). Plain pointers and integers only:
// this header is included by the per-level kernel units, which must not see
// any libimplicit header (every inline function they compiled would be a
// second, differently compiled definition of it; kernels.inc explains).
#pragma once

#include <cstddef>

namespace implicit {
namespace internal {

// A column-major matrix of rows x cols numbers at data[i + j * stride],
// used as itself or, when transposed, as its transpose.
template <typename Number>
struct KernelOperand {
  const Number* data;
  std::ptrdiff_t rows, cols, stride;
  bool transposed;
};

template <typename Number>
struct KernelsFor {
  // c (m x n, column stride c_stride) = beta c + alpha op(a) op(b), with
  // Eigen's products on up to `threads` threads. Shapes already checked.
  void (*gemm)(Number alpha, const KernelOperand<Number>& a, const KernelOperand<Number>& b, Number beta,
               Number* c, std::ptrdiff_t c_stride, int threads);
  // The softmax pass, with the contract of internal::ScaledSoftmaxColumnsKernel
  // (core/cpu_dispatch.h), which forwards to it.
  void (*scaled_softmax_columns)(Number* a, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t stride,
                                 Number beta, const Number* mask, std::ptrdiff_t mask_stride, Number* lse,
                                 bool want_weights, int threads);
  // The Bernoulli prior's pass, with the contract of internal::BernoulliColumnsKernel
  // (core/cpu_dispatch.h), which forwards to it.
  void (*bernoulli_columns)(const Number* t, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t t_stride,
                            const Number* p, Number* k, std::ptrdiff_t k_stride, Number* s, std::ptrdiff_t s_stride,
                            Number* s2, std::ptrdiff_t s2_stride, int threads);
  // The tanh pass, with the contract of internal::TanhColumnsKernel (core/cpu_dispatch.h).
  void (*tanh_columns)(const Number* x, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t x_stride, Number* y,
                       std::ptrdiff_t y_stride, int threads);
  // The solvers' low-rank products, with the contracts of
  // internal::ColumnDotsKernel and internal::AddColumnCombinationKernel
  // (core/cpu_dispatch.h), which forward to them.
  void (*column_dots)(const Number* a, std::ptrdiff_t n, std::ptrdiff_t k, std::ptrdiff_t a_stride, const Number* x,
                      Number* out);
  void (*add_column_combination)(const Number* a, std::ptrdiff_t n, std::ptrdiff_t k, std::ptrdiff_t a_stride,
                                 const Number* coef, Number* y);
  // The solvers' per-sample vector work, with the contract of
  // internal::CombineKernel (core/cpu_dispatch.h).
  void (*combine)(std::ptrdiff_t n, int k, const Number* const* x, const Number* coef, Number* out);
  // The clamp's passes, with the contracts of internal::ClampMergeKernel and
  // internal::ClampCombineKernel (core/cpu_dispatch.h), as `merge` says.
  void (*clamp_columns)(bool merge, std::ptrdiff_t rows, std::ptrdiff_t cols, const Number* mask,
                        std::ptrdiff_t mask_stride, const Number* x, std::ptrdiff_t x_stride, const Number* c,
                        std::ptrdiff_t c_stride, Number* out, std::ptrdiff_t out_stride, Number* penalty,
                        int threads);
  // The LayerNorm pass, with the contract of internal::LayerNormColumnsKernel (core/cpu_dispatch.h).
  void (*layer_norm_columns)(const Number* y, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t y_stride,
                             Number epsilon, Number* yhat, std::ptrdiff_t yhat_stride, Number* s, int threads);
};

struct KernelTable {
  KernelsFor<float> f;
  KernelsFor<double> d;
};

// One per compiled level (kernels_<level>.cc).
const KernelTable& GenericKernels();
#ifdef IMPLICIT_CPU_DISPATCH_X86
const KernelTable& X86_64_V3Kernels();
const KernelTable& X86_64_V4Kernels();
#endif

}  // namespace internal
}  // namespace implicit
