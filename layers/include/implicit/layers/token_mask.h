/// \file
/// TokenMask: a per-token mask (N x B) expanded to the coordinates of the
/// Energy Transformer's token-major state layout (N*D x B; token A of sample b
/// is entries [A*D, (A+1)*D) of column b), e.g.\ the free mask of
/// EnergyTransformerMap::SetClamp or ClampedEnergy::SetClamp.
///
/// \code
///   implicit::Matrix<double> masked(16, B);            // 1 = masked (free) token
///   implicit::Matrix<double> m = implicit::TokenMask<double>(masked, 32);  // 512 x B
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <stdexcept>
#include <string>

namespace implicit {

/// Expands a per-token mask (N x B, 1 = free, 0 = clamped) to the coordinate
/// mask (N*D x B) of the token-major layout: every coordinate of token A in
/// sample b takes the value token_mask(A, b).
/// \throws std::invalid_argument when token_dim (D) < 1.
template <typename Scalar>
Matrix<Scalar> TokenMask(const Matrix<Scalar>& token_mask, Index token_dim) {
  if (token_dim < 1) {
    throw std::invalid_argument("TokenMask: token_dim must be >= 1, got " + std::to_string(token_dim));
  }
  Matrix<Scalar> mask(token_mask.rows() * token_dim, token_mask.cols());
  for (Index b = 0; b < token_mask.cols(); ++b)
    for (Index A = 0; A < token_mask.rows(); ++A)
      mask.col(b).segment(A * token_dim, token_dim).setConstant(token_mask(A, b));
  return mask;
}

}  // namespace implicit
