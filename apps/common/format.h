// Number and string formatting for the programs' tables and messages.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace implicit_apps {

// Formats a number compactly: %.*g with `digits` significant digits.
inline std::string Fmt(double v, int digits = 4) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}
inline std::string FmtFixed(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}
// All 17 significant digits (CSV cells); "null" for inf and nan, as in the JSON.
inline std::string FmtExact(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
inline bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// A piece of user input fit for a one-line message: bytes that are not
// printable ASCII (newlines, binary data) become '?', and text longer than
// `max` characters is cut to its first `max` followed by "...".
inline std::string Excerpt(const std::string& s, std::size_t max = 60) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 32 && c < 127) ? static_cast<char>(c) : '?';
  }
  if (s.size() > max) out += "...";
  return out;
}
// "a, b, c".
inline std::string JoinNames(const std::vector<std::string>& names, const std::string& separator = ", ") {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : separator) + n;
  return s;
}

}  // namespace implicit_apps
