// Runtime CPU dispatch (cpu_dispatch.h): which kernel level runs, and the
// entry points (internal::Gemm, the softmax pass) that forward to it.
#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/gemm.h>

#include "kernels/kernel_table.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace implicit {
namespace {

using internal::KernelTable;

bool CpuRuns(CpuLevel level) {
  switch (level) {
    case CpuLevel::kGeneric:
      return true;
#ifdef IMPLICIT_CPU_DISPATCH_X86
    // libgcc/compiler-rt check the CPU's features and that the OS saves the
    // AVX / AVX-512 registers. GCC knows the levels by name; Clang only the
    // features, of which these are the ones the vectorised kernels use.
    case CpuLevel::kX86_64_V3:
      __builtin_cpu_init();
#if defined(__GNUC__) && !defined(__clang__)
      return __builtin_cpu_supports("x86-64-v3");
#else
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
#endif
    case CpuLevel::kX86_64_V4:
      __builtin_cpu_init();
#if defined(__GNUC__) && !defined(__clang__)
      return __builtin_cpu_supports("x86-64-v4");
#else
      return CpuRuns(CpuLevel::kX86_64_V3) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
#endif
    default:
      return false;
  }
}

const KernelTable& TableOf(CpuLevel level) {
  switch (level) {
#ifdef IMPLICIT_CPU_DISPATCH_X86
    case CpuLevel::kX86_64_V3:
      return internal::X86_64_V3Kernels();
    case CpuLevel::kX86_64_V4:
      return internal::X86_64_V4Kernels();
#endif
    default:
      return internal::GenericKernels();
  }
}

bool IsAvailable(CpuLevel level) {
  for (CpuLevel available : AvailableCpuLevels()) {
    if (available == level) return true;
  }
  return false;
}

CpuLevel InitialLevel() {
  const char* env = std::getenv("IMPLICIT_CPU_LEVEL");
  if (env == nullptr || *env == '\0') return AvailableCpuLevels().back();
  CpuLevel level;
  if (!ParseCpuLevel(env, &level)) {
    throw std::runtime_error(std::string("IMPLICIT_CPU_LEVEL=") + env +
                             ": unknown level (generic, x86-64-v3, x86-64-v4)");
  }
  if (IsAvailable(level)) return level;
  throw std::runtime_error(std::string("IMPLICIT_CPU_LEVEL=") + env +
                           ": this CPU or this build does not have that level");
}

struct DispatchState {
  explicit DispatchState(CpuLevel l) : level(l), table(&TableOf(l)) {}
  std::atomic<CpuLevel> level;
  std::atomic<const KernelTable*> table;
};

// Chosen at the first call (a throwing choice is tried again at the next).
DispatchState& CurrentDispatch() {
  static DispatchState state(InitialLevel());
  return state;
}

const KernelTable& ActiveKernels() { return *CurrentDispatch().table.load(std::memory_order_relaxed); }

int EigenProductThreads() { return Eigen::nbThreads(); }

}  // namespace

const char* ToString(CpuLevel level) {
  switch (level) {
    case CpuLevel::kGeneric:
      return "generic";
    case CpuLevel::kX86_64_V3:
      return "x86-64-v3";
    case CpuLevel::kX86_64_V4:
      return "x86-64-v4";
  }
  return "unknown";
}

bool ParseCpuLevel(const std::string& name, CpuLevel* level) {
  for (CpuLevel l : {CpuLevel::kGeneric, CpuLevel::kX86_64_V3, CpuLevel::kX86_64_V4}) {
    if (name == ToString(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

std::vector<CpuLevel> AvailableCpuLevels() {
  std::vector<CpuLevel> levels{CpuLevel::kGeneric};
#ifdef IMPLICIT_CPU_DISPATCH_X86
  for (CpuLevel l : {CpuLevel::kX86_64_V3, CpuLevel::kX86_64_V4}) {
    if (CpuRuns(l)) levels.push_back(l);
  }
#endif
  return levels;
}

CpuLevel ActiveCpuLevel() { return CurrentDispatch().level.load(); }

void SetCpuLevel(CpuLevel level) {
  if (!IsAvailable(level)) {
    throw std::invalid_argument(std::string("SetCpuLevel: level ") + ToString(level) +
                                " is not available on this CPU or in this build");
  }
  DispatchState& state = CurrentDispatch();
  state.table.store(&TableOf(level));
  state.level.store(level);
}

namespace internal {

template <typename Number>
static const KernelsFor<Number>& KernelsOf(const KernelTable& table) {
  if constexpr (std::is_same_v<Number, float>) {
    return table.f;
  } else {
    return table.d;
  }
}

template <typename Number>
void Gemm(Number alpha, const GemmOperand<Number>& a, const GemmOperand<Number>& b, Number beta, Number* c,
          Index c_stride) {
  if (a.op_cols() != b.op_rows()) {
    throw std::invalid_argument("internal::Gemm: a " + std::to_string(a.op_rows()) + "x" +
                                std::to_string(a.op_cols()) + " times b " + std::to_string(b.op_rows()) + "x" +
                                std::to_string(b.op_cols()));
  }
  if (a.op_rows() == 0 || b.op_cols() == 0) return;
  const KernelOperand<Number> ka{a.data, a.rows, a.cols, a.stride, a.transposed};
  const KernelOperand<Number> kb{b.data, b.rows, b.cols, b.stride, b.transposed};
  KernelsOf<Number>(ActiveKernels()).gemm(alpha, ka, kb, beta, c, c_stride, EigenProductThreads());
}

template <typename Number>
void ScaledSoftmaxColumnsKernel(Number* a, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t stride,
                                Number beta, const Number* mask, std::ptrdiff_t mask_stride, Number* lse,
                                bool want_weights, int threads) {
  KernelsOf<Number>(ActiveKernels()).scaled_softmax_columns(a, rows, cols, stride, beta, mask, mask_stride, lse,
                                                      want_weights, threads);
}

template <typename Number>
void BernoulliColumnsKernel(const Number* t, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t t_stride,
                            const Number* p, Number* k, std::ptrdiff_t k_stride, Number* s, std::ptrdiff_t s_stride,
                            Number* s2, std::ptrdiff_t s2_stride) {
  KernelsOf<Number>(ActiveKernels()).bernoulli_columns(t, rows, cols, t_stride, p, k, k_stride, s, s_stride, s2,
                                                       s2_stride, EigenProductThreads());
}

template <typename Number>
void TanhColumnsKernel(const Number* x, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t x_stride,
                       Number* y, std::ptrdiff_t y_stride) {
  KernelsOf<Number>(ActiveKernels()).tanh_columns(x, rows, cols, x_stride, y, y_stride, EigenProductThreads());
}

template <typename Number>
void ColumnDotsKernel(const Number* a, std::ptrdiff_t n, std::ptrdiff_t k, std::ptrdiff_t a_stride, const Number* x,
                      Number* out) {
  KernelsOf<Number>(ActiveKernels()).column_dots(a, n, k, a_stride, x, out);
}

template <typename Number>
void AddColumnCombinationKernel(const Number* a, std::ptrdiff_t n, std::ptrdiff_t k, std::ptrdiff_t a_stride,
                                const Number* coef, Number* y) {
  KernelsOf<Number>(ActiveKernels()).add_column_combination(a, n, k, a_stride, coef, y);
}

template <typename Number>
void CombineKernel(std::ptrdiff_t n, int k, const Number* const* x, const Number* coef, Number* out) {
  if (k < 1 || k > 4) throw std::invalid_argument("internal::CombineKernel: k = " + std::to_string(k) + ", not in [1, 4]");
  KernelsOf<Number>(ActiveKernels()).combine(n, k, x, coef, out);
}

template <typename Number>
void ClampMergeKernel(std::ptrdiff_t rows, std::ptrdiff_t cols, const Number* mask, std::ptrdiff_t mask_stride,
                      const Number* x, std::ptrdiff_t x_stride, const Number* c, std::ptrdiff_t c_stride, Number* out,
                      std::ptrdiff_t out_stride) {
  KernelsOf<Number>(ActiveKernels()).clamp_columns(true, rows, cols, mask, mask_stride, x, x_stride, c, c_stride,
                                                   out, out_stride, nullptr, EigenProductThreads());
}

template <typename Number>
void ClampCombineKernel(std::ptrdiff_t rows, std::ptrdiff_t cols, const Number* mask, std::ptrdiff_t mask_stride,
                        const Number* x, std::ptrdiff_t x_stride, const Number* c, std::ptrdiff_t c_stride,
                        Number* out, std::ptrdiff_t out_stride, Number* penalty) {
  KernelsOf<Number>(ActiveKernels()).clamp_columns(false, rows, cols, mask, mask_stride, x, x_stride, c, c_stride,
                                                   out, out_stride, penalty, EigenProductThreads());
}

template <typename Number>
void LayerNormColumnsKernel(const Number* y, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t y_stride,
                            Number epsilon, Number* yhat, std::ptrdiff_t yhat_stride, Number* s) {
  KernelsOf<Number>(ActiveKernels()).layer_norm_columns(y, rows, cols, y_stride, epsilon, yhat, yhat_stride, s,
                                                        EigenProductThreads());
}

template void Gemm<float>(float, const GemmOperand<float>&, const GemmOperand<float>&, float, float*, Index);
template void Gemm<double>(double, const GemmOperand<double>&, const GemmOperand<double>&, double, double*,
                           Index);
template void ScaledSoftmaxColumnsKernel<float>(float*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, float,
                                                const float*, std::ptrdiff_t, float*, bool, int);
template void ScaledSoftmaxColumnsKernel<double>(double*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, double,
                                                 const double*, std::ptrdiff_t, double*, bool, int);
template void BernoulliColumnsKernel<float>(const float*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t,
                                            const float*, float*, std::ptrdiff_t, float*, std::ptrdiff_t, float*,
                                            std::ptrdiff_t);
template void BernoulliColumnsKernel<double>(const double*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t,
                                             const double*, double*, std::ptrdiff_t, double*, std::ptrdiff_t, double*,
                                             std::ptrdiff_t);
template void TanhColumnsKernel<float>(const float*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, float*,
                                       std::ptrdiff_t);
template void TanhColumnsKernel<double>(const double*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, double*,
                                        std::ptrdiff_t);
template void ColumnDotsKernel<float>(const float*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, const float*,
                                      float*);
template void ColumnDotsKernel<double>(const double*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t,
                                       const double*, double*);
template void AddColumnCombinationKernel<float>(const float*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t,
                                                const float*, float*);
template void AddColumnCombinationKernel<double>(const double*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t,
                                                 const double*, double*);
template void CombineKernel<float>(std::ptrdiff_t, int, const float* const*, const float*, float*);
template void CombineKernel<double>(std::ptrdiff_t, int, const double* const*, const double*, double*);
template void ClampMergeKernel<float>(std::ptrdiff_t, std::ptrdiff_t, const float*, std::ptrdiff_t, const float*,
                                      std::ptrdiff_t, const float*, std::ptrdiff_t, float*, std::ptrdiff_t);
template void ClampMergeKernel<double>(std::ptrdiff_t, std::ptrdiff_t, const double*, std::ptrdiff_t, const double*,
                                       std::ptrdiff_t, const double*, std::ptrdiff_t, double*, std::ptrdiff_t);
template void ClampCombineKernel<float>(std::ptrdiff_t, std::ptrdiff_t, const float*, std::ptrdiff_t, const float*,
                                        std::ptrdiff_t, const float*, std::ptrdiff_t, float*, std::ptrdiff_t, float*);
template void ClampCombineKernel<double>(std::ptrdiff_t, std::ptrdiff_t, const double*, std::ptrdiff_t,
                                         const double*, std::ptrdiff_t, const double*, std::ptrdiff_t, double*,
                                         std::ptrdiff_t, double*);
template void LayerNormColumnsKernel<float>(const float*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, float,
                                            float*, std::ptrdiff_t, float*);
template void LayerNormColumnsKernel<double>(const double*, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, double,
                                             double*, std::ptrdiff_t, double*);

}  // namespace internal
}  // namespace implicit
