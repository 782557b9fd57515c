// Reading data files for the loaders (see data_files.h), through zlib.
#include "data_files.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace implicit {
namespace data_files {

std::string ReadCompressedOrPlain(const std::string& path, const std::string& kind) {
  const std::string name = kind + " '" + path + "'";
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw std::runtime_error("cannot open " + name + ": " +
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
      throw std::runtime_error("cannot read " + name + ": " + what +
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
    throw std::runtime_error("cannot read " + name + ": " + what +
                             " (truncated or corrupt gzip stream)");
  }
  const int close_code = gzclose(file);
  if (close_code == Z_BUF_ERROR) {
    throw std::runtime_error("cannot read " + name + ": truncated gzip stream (unexpected end of file)");
  }
  if (close_code != Z_OK) {
    throw std::runtime_error("cannot read " + name + ": gzip error " + std::to_string(close_code));
  }
  return text;
}

void ForEachLine(const std::string& text,
                 const std::function<void(int line_number, const std::string& line)>& visit) {
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
    visit(line_number, line);
  }
}

std::vector<std::string> SplitFields(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t p = 0;
  while (true) {
    const std::size_t comma = line.find(',', p);
    fields.push_back(line.substr(p, comma == std::string::npos ? std::string::npos : comma - p));
    if (comma == std::string::npos) return fields;
    p = comma + 1;
  }
}

std::string Excerpt(const std::string& text, std::size_t max_chars) {
  if (text.size() <= max_chars) return "'" + text + "'";
  return "'" + text.substr(0, max_chars) + "...' (" + std::to_string(text.size()) + " characters)";
}

namespace {
// True when [stop, end of field) holds only blanks.
bool OnlyBlanksAfter(const char* stop) {
  while (*stop == ' ' || *stop == '\t') ++stop;
  return *stop == '\0';
}
bool IsBlank(const std::string& field) { return field.find_first_not_of(" \t") == std::string::npos; }
}  // namespace

bool ParseInteger(const std::string& field, long* value) {
  if (IsBlank(field)) return false;
  const char* begin = field.c_str();
  char* stop = nullptr;
  errno = 0;
  *value = std::strtol(begin, &stop, 10);
  return stop != begin && errno == 0 && OnlyBlanksAfter(stop);
}

bool ParseFiniteReal(const std::string& field, double* value) {
  if (IsBlank(field)) return false;
  const char* begin = field.c_str();
  char* stop = nullptr;
  errno = 0;
  *value = std::strtod(begin, &stop);
  // Overflow gives +-HUGE_VAL (not finite); underflow to 0 or a subnormal is fine.
  return stop != begin && std::isfinite(*value) && OnlyBlanksAfter(stop);
}

}  // namespace data_files
}  // namespace implicit
