// 8x8 digits as 16 tokens of 2x2 patches (et-digits, implicit-et).
#pragma once

#include <implicit/core/types.h>

namespace implicit_apps {

// 8x8 digits cut into 2x2 patches: 16 tokens of 4 pixels (x/8 - 1), token A =
// patch A, row-major over the 4x4 grid of patches; patch A covers pixels
// (2 (A / 4) + {0,1}, 2 (A % 4) + {0,1}).
// The row of pixel k (0..3) of patch A (0..15) in an 8x8 digit (row-major).
inline int PatchPixel(int A, int k) { return 8 * (2 * (A / 4) + k / 2) + 2 * (A % 4) + k % 2; }

inline implicit::Matrix<double> DigitPatches(const implicit::Matrix<double>& scaled) {
  implicit::Matrix<double> p(64, scaled.cols());
  for (implicit::Index b = 0; b < scaled.cols(); ++b)
    for (int i = 0; i < 64; ++i) p(i, b) = scaled(PatchPixel(i / 4, i % 4), b);
  return p;
}
// The inverse of DigitPatches.
inline implicit::Matrix<double> PatchesToDigits(const implicit::Matrix<double>& patches) {
  implicit::Matrix<double> x(64, patches.cols());
  for (implicit::Index b = 0; b < patches.cols(); ++b)
    for (int i = 0; i < 64; ++i) x(PatchPixel(i / 4, i % 4), b) = patches(i, b);
  return x;
}

}  // namespace implicit_apps
