/// \file
/// The digits data set (8x8 handwritten digits, 1,797 images; see data/README.md)
/// that the apps and tests use.
///
/// LoadDigits reads the project's CSV format — one image per line, 64 integer
/// pixel values 0..16 in row-major order, then the class label 0..9 — either
/// gzip-compressed (data/digits.csv.gz) or plain. Any problem (missing or
/// unreadable file, corrupt gzip stream, wrong column count, a non-integer or
/// out-of-range value) throws std::runtime_error naming the file and, for
/// malformed contents, the line and column.
///
/// \code
///   implicit::DigitsDataset digits = implicit::LoadDigits("data/digits.csv.gz");
///   implicit::Matrix<double> x = digits.Scaled();   // 64 x 1797, values x/8 - 1 in [-1, 1]
///   int label = digits.labels[0];
/// \endcode
///
/// FindDataFile looks the file up in a list of directories (e.g. the build's
/// source data dir and the installed share/implicit) and returns the first hit.
#pragma once

#include <implicit/core/types.h>

#include <string>
#include <vector>

namespace implicit {

/// The images and labels of a digits CSV file, as LoadDigits reads them.
struct DigitsDataset {
  static constexpr int kPixels = 64;  ///< Pixels per image: 8 x 8 images.
  static constexpr int kSide = 8;     ///< Side length of an image in pixels.
  static constexpr int kMaxPixel = 16;  ///< Largest raw pixel value (pixels are 0..16).

  /// 64 x N raw pixel values 0..16; column j is image j (pixel (r, c) at row 8r + c).
  Matrix<double> pixels;
  std::vector<int> labels;  ///< N class labels 0..9
  std::string source;       ///< the file it was read from

  /// The number N of images.
  Index size() const { return pixels.cols(); }
  /// The pixels scaled to [-1, 1] as x / 8 - 1 (the convention of every app).
  Matrix<double> Scaled() const { return pixels.array() / 8.0 - 1.0; }
};

/// Reads a digits CSV (gzip or plain).
/// \throws std::runtime_error on any problem (missing or unreadable file,
///   corrupt gzip stream, malformed contents, no images), naming the file.
DigitsDataset LoadDigits(const std::string& path);

/// Parses CSV text already in memory; `source` names it in error messages.
/// \throws std::runtime_error naming `source`, the line and the column on
///   malformed contents, or when the text holds no images.
DigitsDataset ParseDigitsCsv(const std::string& text, const std::string& source);

/// The first `directory + "/" + file_name` that exists and is readable, or ""
/// when none does. Empty directories are skipped.
std::string FindDataFile(const std::string& file_name, const std::vector<std::string>& directories);

}  // namespace implicit
