// Loading the digits CSV (see digits.h).
#include <implicit/core/digits.h>

#include "data_files.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace implicit {

DigitsDataset ParseDigitsCsv(const std::string& text, const std::string& source) {
  constexpr int kColumns = DigitsDataset::kPixels + 1;
  std::vector<double> values;
  std::vector<int> labels;
  data_files::ForEachLine(text, [&](int line_number, const std::string& line) {
    auto fail = [&](const std::string& what) {
      throw std::runtime_error("malformed digits file '" + source + "', line " +
                               std::to_string(line_number) + ": " + what);
    };
    const std::vector<std::string> fields = data_files::SplitFields(line);
    if (fields.size() != kColumns) {
      fail("expected " + std::to_string(kColumns) + " columns, got " + std::to_string(fields.size()));
    }
    for (int column = 1; column <= kColumns; ++column) {
      const std::string& field = fields[column - 1];
      long v = 0;
      if (!data_files::ParseInteger(field, &v)) {
        fail("column " + std::to_string(column) + ": " + data_files::Excerpt(field) +
             " is not an integer");
      }
      if (column <= DigitsDataset::kPixels) {
        if (v < 0 || v > DigitsDataset::kMaxPixel)
          fail("column " + std::to_string(column) + ": pixel value " + std::to_string(v) +
               " outside 0..16");
        values.push_back(static_cast<double>(v));
      } else {
        if (v < 0 || v > 9)
          fail("column " + std::to_string(column) + ": label " + std::to_string(v) +
               " outside 0..9");
        labels.push_back(static_cast<int>(v));
      }
    }
  });
  if (labels.empty()) throw std::runtime_error("digits file '" + source + "' contains no images");
  DigitsDataset d;
  d.source = source;
  d.labels = std::move(labels);
  const Index n = static_cast<Index>(d.labels.size());
  d.pixels = Eigen::Map<const Matrix<double>>(values.data(), DigitsDataset::kPixels, n);
  return d;
}

DigitsDataset LoadDigits(const std::string& path) {
  if (path.empty()) throw std::runtime_error("digits file: empty path");
  if (::access(path.c_str(), R_OK) != 0) {
    throw std::runtime_error("cannot open digits file '" + path + "': " + std::strerror(errno));
  }
  return ParseDigitsCsv(data_files::ReadCompressedOrPlain(path, "digits file"), path);
}

std::string FindDataFile(const std::string& file_name, const std::vector<std::string>& directories) {
  for (const std::string& dir : directories) {
    if (dir.empty()) continue;
    const std::string path = dir + "/" + file_name;
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return "";
}

}  // namespace implicit
