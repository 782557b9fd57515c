/// \file
/// Coefficient-wise activations at the CPU's best level (cpu_dispatch.h).
/// Eigen 3.4 vectorises tanh for float only: `x.array().tanh()` of doubles is
/// std::tanh per coefficient, which made tanh most of a deq-tanh map
/// evaluation (n = 128: four times its GEMM). implicit::Tanh is vectorised for
/// float and double, accurate to a few ulps, and shares a large matrix's
/// columns among Eigen's threads.
///
/// \code
///   implicit::GemmInto<double>(out, W, false, z);   // out = W z
///   out += injection;
///   implicit::Tanh<double>(out, out);              // out = tanh(out), in place
/// \endcode
#pragma once

#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/types.h>

#include <type_traits>

namespace implicit {

/// out = tanh(x) coefficient by coefficient, on matrices or views (columns
/// contiguous). `out` may be `x` itself (in place), not a partial overlap.
/// float and double run the dispatched kernel (a few ulps; NaN where x is,
/// tanh(+-inf) = +-1); other scalar types (Jets, the reverse tape's variables)
/// Eigen's tanh.
/// \throws std::invalid_argument when out is not the size of x.
template <typename Scalar>
void Tanh(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) {
  internal::CheckShape("Tanh(out)", out, x.rows(), x.cols());
  if constexpr (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) {
    internal::TanhColumnsKernel<Scalar>(x.data(), x.rows(), x.cols(), x.outerStride(), out.data(),
                                        out.outerStride());
  } else {
    out = x.array().tanh().matrix();
  }
}

}  // namespace implicit
