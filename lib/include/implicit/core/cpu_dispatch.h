/// \file
/// Runtime CPU dispatch: the hot dense kernels (matrix products, the softmax
/// pass of the attention energies) are compiled for several x86-64 levels and
/// the best one the CPU runs is chosen once, at the first call. So the default
/// build (plain -DCMAKE_BUILD_TYPE=Release, or a package built on another
/// machine) runs AVX2/FMA or AVX-512 code where the CPU has it, and
/// IMPLICIT_NATIVE is not needed for speed.
///
/// \code
///   implicit::CpuLevel level = implicit::ActiveCpuLevel();   // e.g. x86-64-v4
///   std::cout << implicit::ToString(level) << "\n";
///   implicit::SetCpuLevel(implicit::CpuLevel::kGeneric);     // force the generic code
/// \endcode
///
/// Levels: kGeneric (the build's own flags: any CPU the library was built
/// for; the only level on other architectures), kX86_64_V3 (AVX, AVX2, FMA,
/// BMI1/2, ...: -march=x86-64-v3), kX86_64_V4 (AVX-512 F/BW/CD/DQ/VL:
/// -march=x86-64-v4). The environment variable IMPLICIT_CPU_LEVEL (generic,
/// x86-64-v3, x86-64-v4) picks the level at the first call instead; a level
/// the CPU cannot run, or an unknown name, is an error then (std::runtime_error
/// from the first kernel call), never a silent fallback.
///
/// Which calls use the kernels: internal::Gemm (gemm.h) and the products and
/// softmax passes of the attention energies that call it (ModernHopfieldEnergy,
/// ...), the RBM's Bernoulli prior, implicit::Tanh (activations.h), and the
/// low-rank products and per-sample vector work of the quasi-Newton solvers
/// (Anderson, Broyden, L-BFGS), the clamp's passes of ClampedEnergy and
/// LayerNorm's (ColumnLayerNorm, the Energy Transformer's tokens).
/// Results of different levels agree to round-off, not bitwise (FMA and vector
/// widths change the order of additions); one level gives the same results
/// every run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace implicit {

/// An x86-64 instruction-set level the dense kernels are compiled for (see the levels above).
enum class CpuLevel { kGeneric, kX86_64_V3, kX86_64_V4 };

/// \var CpuLevel::kGeneric
/// The build's own flags: any CPU the library was built for (the only level on other architectures).
/// \var CpuLevel::kX86_64_V3
/// AVX, AVX2, FMA, BMI1/2, ... (-march=x86-64-v3).
/// \var CpuLevel::kX86_64_V4
/// AVX-512 F/BW/CD/DQ/VL (-march=x86-64-v4).

/// The name of a level: "generic", "x86-64-v3", "x86-64-v4".
const char* ToString(CpuLevel level);
/// The level named `name` (as ToString writes it); false when no level has it.
bool ParseCpuLevel(const std::string& name, CpuLevel* level);

/// The levels compiled into this library that this CPU can run, lowest first
/// (kGeneric is always among them).
std::vector<CpuLevel> AvailableCpuLevels();

/// The level the kernels run at: the highest available one, or
/// IMPLICIT_CPU_LEVEL's, chosen at the first call.
/// \throws std::runtime_error when IMPLICIT_CPU_LEVEL names no level or one this CPU cannot run.
CpuLevel ActiveCpuLevel();

/// Makes the kernels run at `level` from now on (for comparisons and tests;
/// not meant to be called while other threads run kernels).
/// \throws std::invalid_argument when `level` is not available.
void SetCpuLevel(CpuLevel level);

namespace internal {

/// The softmax pass of ScaledColumnSoftmaxInPlace (layers/log_sum_exp.h, which
/// applies the rules for special columns) at the active level, for float and
/// double: column by column of the rows x cols matrix a (column stride
/// `stride`), a <- beta a + mask (mask nullptr, one column (mask_stride 0) or
/// one per column), then where the column's maximum m is finite and the sum of
/// exp(a - m) is not NaN, lse[j] = m + log(sum) and (want_weights) the column
/// becomes its softmax; elsewhere the column keeps beta a + mask and lse[j] is
/// m (not finite) or NaN (the sum was NaN). Columns are shared among `threads`
/// OpenMP threads.
template <typename Number>
void ScaledSoftmaxColumnsKernel(Number* a, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t stride,
                                Number beta, const Number* mask, std::ptrdiff_t mask_stride, Number* lse,
                                bool want_weights, int threads);

/// The pass of the Bernoulli hidden prior (layers/hidden_prior.h) at the
/// active level, for float and double: with p one value per row of t (rows x
/// cols, column stride t_stride), k = K(t) = log(1 - p + p e^t), s = K'(t) =
/// sigmoid(t + logit p) and s2 = K''(t) = s (1 - s), each into a rows x cols
/// matrix of the given column stride, or skipped when nullptr; one exponential
/// per entry serves all three. K keeps its relative accuracy near t = 0 (K ~ p
/// t), s2 where s is near 1. The limits: K(-inf) = log(1 - p), K(+inf) = +inf,
/// s in [0, 1], s2 >= 0 (0 or a subnormal in the tails); NaN only where t is.
/// Columns are shared among Eigen's threads when large (as TanhColumnsKernel).
template <typename Number>
void BernoulliColumnsKernel(const Number* t, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t t_stride,
                            const Number* p, Number* k, std::ptrdiff_t k_stride, Number* s, std::ptrdiff_t s_stride,
                            Number* s2, std::ptrdiff_t s2_stride);

/// y = tanh(x) at the active level, for float and double, column by column of
/// x (rows x cols, column stride x_stride) into y (column stride y_stride; y
/// may be x itself, not a partial overlap), to a few ulps; NaN where x is.
/// Columns are shared among Eigen's threads (Eigen::nbThreads()) when large.
/// The public entry point is implicit::Tanh (activations.h).
template <typename Number>
void TanhColumnsKernel(const Number* x, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t x_stride,
                       Number* y, std::ptrdiff_t y_stride);

/// The solvers' low-rank products at the active level, for float and double
/// (Broyden's and Anderson's histories: internal/low_rank.h of the solvers):
/// out[i] = a_i . x for the k columns a_i of the n x k matrix a (column stride
/// a_stride). The order of each sum depends on n only, never on addresses.
template <typename Number>
void ColumnDotsKernel(const Number* a, std::ptrdiff_t n, std::ptrdiff_t k, std::ptrdiff_t a_stride, const Number* x,
                      Number* out);

/// y += sum_i coef[i] a_i over the k columns a_i of the n x k matrix a (column
/// stride a_stride), at the active level, for float and double.
template <typename Number>
void AddColumnCombinationKernel(const Number* a, std::ptrdiff_t n, std::ptrdiff_t k, std::ptrdiff_t a_stride,
                                const Number* coef, Number* y);

/// out = sum_j coef[j] x_j over k vectors x_0, ..., x_{k-1} of n numbers, entry
/// by entry, at the active level, for float and double: the solvers'
/// per-sample vector work (differences of iterates, scaled copies) in the CPU's
/// vector units in the default build as well. out may be one of the x_j (not
/// a partial overlap). Each entry is rounded alike wherever it lies: a product,
/// then fused multiply-adds in the order j = 1, 2, ....
/// \throws std::invalid_argument unless 1 <= k <= 4.
template <typename Number>
void CombineKernel(std::ptrdiff_t n, int k, const Number* const* x, const Number* coef, Number* out);

/// The clamp's passes of ClampedEnergy (clamped_energy.h) at the active level,
/// for float and double, column by column of rows x cols matrices (each with
/// its column stride), with m the free mask (entries 0 or 1), x the state and
/// c the clamped values: ClampMergeKernel writes out = m x + (1 - m) c,
/// ClampCombineKernel out = m out + (1 - m) (x - c) (unless out is null) and,
/// unless penalty is null, adds 0.5 |(1 - m) (.) (x_j - c_j)|^2 to penalty[j]
/// for each column j.
/// out is exact (the same at every level: m is 0 or 1) and may be x itself;
/// the penalty agrees across levels to round-off. Columns are shared among
/// Eigen's threads when large (as TanhColumnsKernel).
template <typename Number>
void ClampMergeKernel(std::ptrdiff_t rows, std::ptrdiff_t cols, const Number* mask, std::ptrdiff_t mask_stride,
                      const Number* x, std::ptrdiff_t x_stride, const Number* c, std::ptrdiff_t c_stride, Number* out,
                      std::ptrdiff_t out_stride);
template <typename Number>
void ClampCombineKernel(std::ptrdiff_t rows, std::ptrdiff_t cols, const Number* mask, std::ptrdiff_t mask_stride,
                        const Number* x, std::ptrdiff_t x_stride, const Number* c, std::ptrdiff_t c_stride,
                        Number* out, std::ptrdiff_t out_stride, Number* penalty);

/// LayerNorm's pass (ColumnLayerNorm::Normalize, layers/layer_norm.h) at the
/// active level, for float and double, column by column of y (rows x cols,
/// column stride y_stride): yhat_b = (y_b - mean y_b) / s[b] with s[b] =
/// sqrt(|y_b - mean y_b|^2 / rows + epsilon), into yhat (column stride
/// yhat_stride; it may be y itself, not a partial overlap). Columns are shared
/// among Eigen's threads when large (as TanhColumnsKernel).
template <typename Number>
void LayerNormColumnsKernel(const Number* y, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t y_stride,
                            Number epsilon, Number* yhat, std::ptrdiff_t yhat_stride, Number* s);

}  // namespace internal
}  // namespace implicit
