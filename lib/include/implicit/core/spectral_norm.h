/// \file
/// The spectral norm |A|_2 (largest singular value) of a dense matrix,
/// compiled once in the core library (Eigen's JacobiSVD is one of the largest
/// templates to compile; initialising contractive maps and test matrices needs
/// only this number).
///
/// \code
///   implicit::Matrix<double> W = ...;
///   W *= 0.9 / implicit::SpectralNorm(W);     // now |W|_2 = 0.9
/// \endcode
#pragma once

#include <implicit/core/types.h>

namespace implicit {

/// Largest singular value of `m` (0 for an empty matrix).
double SpectralNorm(ConstMatrixRef<double> m);

}  // namespace implicit
