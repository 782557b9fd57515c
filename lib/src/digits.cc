// Loading the digits CSV (see digits.h). Reads gzip or plain text through zlib.
#include <implicit/core/digits.h>

#include <zlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace implicit {
namespace {

std::string ReadCompressedOrPlain(const std::string& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw std::runtime_error("cannot open digits file '" + path + "': " +
                             (errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  std::string text;
  char buffer[1 << 15];
  while (true) {
    const int n = gzread(file, buffer, sizeof buffer);
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      std::string what = code == Z_ERRNO ? std::strerror(errno) : (message ? message : "unknown");
      gzclose(file);
      throw std::runtime_error("cannot read digits file '" + path + "': " + what +
                               " (corrupt or not a gzip/CSV file?)");
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  // gzread returns 0 at a truncated gzip stream's end too; gzerror tells.
  int code = 0;
  const char* message = gzerror(file, &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    std::string what = message ? message : "unknown";
    gzclose(file);
    throw std::runtime_error("cannot read digits file '" + path + "': " + what +
                             " (truncated or corrupt gzip stream)");
  }
  const int close_code = gzclose(file);
  if (close_code == Z_BUF_ERROR) {
    throw std::runtime_error("cannot read digits file '" + path +
                             "': truncated gzip stream (unexpected end of file)");
  }
  if (close_code != Z_OK) {
    throw std::runtime_error("cannot read digits file '" + path + "': gzip error " +
                             std::to_string(close_code));
  }
  return text;
}

}  // namespace

DigitsDataset ParseDigitsCsv(const std::string& text, const std::string& source) {
  constexpr int kColumns = DigitsDataset::kPixels + 1;
  std::vector<double> values;
  std::vector<int> labels;
  std::size_t pos = 0;
  int line_number = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    auto fail = [&](const std::string& what) -> void {
      throw std::runtime_error("malformed digits file '" + source + "', line " +
                               std::to_string(line_number) + ": " + what);
    };
    int column = 0;
    std::size_t p = 0;
    while (true) {
      std::size_t comma = line.find(',', p);
      const std::string field =
          line.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
      ++column;
      if (column > kColumns) {
        std::size_t count = 1;
        for (char ch : line) count += ch == ',';
        fail("expected " + std::to_string(kColumns) + " columns, got " + std::to_string(count));
      }
      const char* begin = field.c_str();
      char* stop = nullptr;
      errno = 0;
      const long v = std::strtol(begin, &stop, 10);
      while (stop != nullptr && (*stop == ' ' || *stop == '\t')) ++stop;
      if (field.find_first_not_of(" \t") == std::string::npos || stop == begin || *stop != '\0' ||
          errno != 0) {
        fail("column " + std::to_string(column) + ": '" + field + "' is not an integer");
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
      if (comma == std::string::npos) break;
      p = comma + 1;
    }
    if (column != kColumns)
      fail("expected " + std::to_string(kColumns) + " columns, got " + std::to_string(column));
  }
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
  return ParseDigitsCsv(ReadCompressedOrPlain(path), path);
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
