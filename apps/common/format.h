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
// "a, b, c".
inline std::string JoinNames(const std::vector<std::string>& names, const std::string& separator = ", ") {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : separator) + n;
  return s;
}

}  // namespace implicit_apps
