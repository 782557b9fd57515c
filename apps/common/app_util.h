// Helpers shared by the command-line programs (implicit-compare,
// implicit-hopfield, implicit-et): argument parsing with one-line errors, the
// digits data lookup, a terminal table, JSON/CSV output, a progress line on
// stderr, gnuplot plots and a tiny grayscale PNG writer.
//
//   int main(int argc, char** argv) {
//     return implicit_apps::Main("implicit-foo", [&] {
//       implicit_apps::Args args(argc, argv, 1, {"quiet"});   // "quiet" is a flag
//       const double beta = args.Double("beta", 1.0);
//       args.Require(beta > 0, "--beta must be > 0");
//       args.CheckNoneLeft();                  // unknown options are errors
//       ...
//       return 0;
//     });
//   }
//
// Every error ends the program with one line "implicit-foo: error: ..." and a
// non-zero exit status (2 for usage errors, 1 for everything else).
#pragma once

#include <implicit/core/digits.h>
#include <implicit/core/types.h>

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

namespace implicit_apps {

// A bad command line (exit status 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Keeps freed memory in the process for reuse. The solvers and energies
// allocate and free n x B work matrices of a few hundred kB on every call; by
// default glibc serves blocks that large with fresh mmap()s and returns them on
// free, so every call paid page faults on all of its work memory (10% of
// implicit-et's time, more for large Hopfield problems).
inline void KeepFreedMemory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

// Runs `body`, turning any exception into one line on stderr and an exit code.
inline int Main(const char* program, const std::function<int()>& body) {
  KeepFreedMemory();
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << program << ": error: " << e.what() << " (see " << program << " --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << program << ": error: unknown failure\n";
    return 1;
  }
}

// Command-line options "--name value", "--name=value" and flags "--name".
class Args {
 public:
  Args(int argc, char** argv, int first, std::set<std::string> flags)
      : flags_(std::move(flags)) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.size() < 3 || a.compare(0, 2, "--") != 0)
        throw UsageError("unexpected argument '" + a + "'");
      a = a.substr(2);
      std::string value;
      bool has_value = false;
      const std::size_t eq = a.find('=');
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_value = true;
      }
      if (flags_.count(a) > 0) {
        if (has_value) throw UsageError("option --" + a + " takes no value");
        values_[a] = "1";
        continue;
      }
      if (!has_value) {
        if (i + 1 >= argc) throw UsageError("option --" + a + " needs a value");
        value = argv[++i];
      }
      if (values_.count(a) > 0) throw UsageError("option --" + a + " given twice");
      values_[a] = value;
    }
  }

  bool Has(const std::string& name) {
    used_.insert(name);
    return values_.count(name) > 0;
  }
  bool Flag(const std::string& name) { return Has(name); }
  std::string String(const std::string& name, const std::string& fallback = "") {
    return Has(name) ? values_[name] : fallback;
  }
  double Double(const std::string& name, double fallback) {
    if (!Has(name)) return fallback;
    const std::string& s = values_[name];
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
      throw UsageError("--" + name + ": '" + s + "' is not a finite number");
    return v;
  }
  long Int(const std::string& name, long fallback) {
    if (!Has(name)) return fallback;
    const std::string& s = values_[name];
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno == ERANGE)
      throw UsageError("--" + name + ": '" + s + "' is not an integer");
    return v;
  }
  // Comma-separated list; empty entries are errors.
  std::vector<std::string> List(const std::string& name, const std::vector<std::string>& fallback) {
    if (!Has(name)) return fallback;
    std::vector<std::string> out;
    std::stringstream ss(values_[name]);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) throw UsageError("--" + name + ": empty entry in '" + values_[name] + "'");
      out.push_back(item);
    }
    if (out.empty()) throw UsageError("--" + name + ": empty list");
    return out;
  }
  static void Require(bool ok, const std::string& message) {
    if (!ok) throw UsageError(message);
  }
  // Throws for any option that no accessor asked about.
  void CheckNoneLeft() const {
    for (const auto& kv : values_) {
      if (used_.count(kv.first) == 0) throw UsageError("unknown option --" + kv.first);
    }
  }

 private:
  std::set<std::string> flags_;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
};

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

// ---- data -------------------------------------------------------------------
inline std::string ExecutableDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<std::size_t>(n));
  const std::size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

// The digits file: `--data PATH` (a file, or a directory holding
// digits.csv.gz) when given, else the first of $IMPLICIT_DATA_DIR, the source
// tree's data/ (compile definition IMPLICIT_APPS_SOURCE_DATA_DIR), the
// installed share/implicit next to the executable, and the configured install
// prefix's share/implicit (IMPLICIT_APPS_INSTALL_DATA_DIR).
inline std::string FindDigits(const std::string& data_option) {
  const std::string name = "digits.csv.gz";
  if (!data_option.empty()) {
    struct stat st;
    if (::stat(data_option.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      const std::string p = data_option + "/" + name;
      if (::access(p.c_str(), R_OK) != 0)
        throw std::runtime_error("--data: cannot read '" + p + "': " + std::strerror(errno));
      return p;
    }
    return data_option;  // LoadDigits reports a missing or unreadable file
  }
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("IMPLICIT_DATA_DIR")) dirs.push_back(env);
#ifdef IMPLICIT_APPS_SOURCE_DATA_DIR
  dirs.push_back(IMPLICIT_APPS_SOURCE_DATA_DIR);
#endif
  const std::string exe = ExecutableDir();
  if (!exe.empty()) dirs.push_back(exe + "/../share/implicit");
#ifdef IMPLICIT_APPS_INSTALL_DATA_DIR
  dirs.push_back(IMPLICIT_APPS_INSTALL_DATA_DIR);
#endif
  const std::string found = implicit::FindDataFile(name, dirs);
  if (found.empty()) {
    std::string list;
    for (const auto& d : dirs) list += (list.empty() ? "" : ", ") + d;
    throw std::runtime_error("cannot find " + name + " (looked in " + list +
                             "); pass --data PATH");
  }
  return found;
}

// ---- output -----------------------------------------------------------------
inline void WriteTextFile(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + what + " '" + path + "': " + std::strerror(errno));
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + what + " '" + path + "': " + std::strerror(errno));
}

// Fails early (before a long run) when `path` cannot be created: its directory
// must exist and be writable.
inline void CheckWritable(const std::string& path, const std::string& what) {
  if (path.empty()) return;
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error("cannot write " + what + " '" + path + "': directory '" + dir +
                             "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0)
    throw std::runtime_error("cannot write " + what + " '" + path + "': directory '" + dir +
                             "' is not writable");
}

// Minimal JSON building: values are kept as serialised text.
inline std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}
inline std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no inf/nan
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

class JsonObject {
 public:
  JsonObject& Set(const std::string& key, double v) { return Raw(key, JsonNumber(v)); }
  JsonObject& Set(const std::string& key, int v) { return Raw(key, std::to_string(v)); }
  JsonObject& Set(const std::string& key, long v) { return Raw(key, std::to_string(v)); }
  JsonObject& Set(const std::string& key, bool v) { return Raw(key, v ? "true" : "false"); }
  JsonObject& Set(const std::string& key, const std::string& v) { return Raw(key, JsonString(v)); }
  JsonObject& Set(const std::string& key, const char* v) { return Raw(key, JsonString(v)); }
  JsonObject& Set(const std::string& key, const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + JsonNumber(v[i]);
    return Raw(key, s + "]");
  }
  JsonObject& Set(const std::string& key, const JsonObject& v) { return Raw(key, v.ToString()); }
  JsonObject& Set(const std::string& key, const std::vector<JsonObject>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ",\n    " : "\n    ") + v[i].ToString();
    return Raw(key, s + (v.empty() ? "]" : "\n  ]"));
  }
  JsonObject& Raw(const std::string& key, const std::string& json) {
    for (auto& f : fields_) {
      if (f.first == key) {
        f.second = json;
        return *this;
      }
    }
    fields_.emplace_back(key, json);
    return *this;
  }
  std::string ToString() const {
    std::string s = "{";
    for (std::size_t i = 0; i < fields_.size(); ++i)
      s += (i ? ", " : "") + JsonString(fields_[i].first) + ": " + fields_[i].second;
    return s + "}";
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// A text table: columns left-aligned (text) or right-aligned (numbers).
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_aligned = {})
      : header_(std::move(header)), right_(std::move(right_aligned)) {
    right_.resize(header_.size(), false);
  }
  void AddRow(std::vector<std::string> row) {
    row.resize(header_.size());
    rows_.push_back(std::move(row));
  }
  void Print(std::ostream& out) const {
    std::vector<std::size_t> w(header_.size());
    for (std::size_t c = 0; c < w.size(); ++c) {
      w[c] = header_[c].size();
      for (const auto& r : rows_) w[c] = std::max(w[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& r) {
      std::string s;
      for (std::size_t c = 0; c < w.size(); ++c) {
        const std::string pad(w[c] - r[c].size(), ' ');
        s += (c ? "  " : "") + (right_[c] ? pad + r[c] : r[c] + pad);
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      out << s << "\n";
    };
    line(header_);
    std::size_t total = 0;
    for (std::size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
    out << std::string(total, '-') << "\n";
    for (const auto& r : rows_) line(r);
  }
  // CSV with a header row (fields quoted when needed).
  std::string Csv() const {
    auto field = [](const std::string& f) {
      if (f.find_first_of(",\"\n") == std::string::npos) return f;
      std::string q = "\"";
      for (char c : f) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      return q + "\"";
    };
    std::string s;
    auto line = [&](const std::vector<std::string>& r) {
      for (std::size_t c = 0; c < r.size(); ++c) s += (c ? "," : "") + field(r[c]);
      s += "\n";
    };
    line(header_);
    for (const auto& r : rows_) line(r);
    return s;
  }

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// A status line on stderr: rewritten in place on a terminal; on a pipe or file
// at most one line every `interval` seconds (plus the final one).
class Progress {
 public:
  explicit Progress(bool enabled, double interval = 2.0)
      : enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0), interval_(interval),
        last_(std::chrono::steady_clock::now() - std::chrono::hours(1)) {}
  ~Progress() { Done(); }
  void Update(const std::string& text, bool force = false) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (tty_) {
      if (!force && since < 0.1) return;
      std::string line = text.size() > 118 ? text.substr(0, 118) : text;
      std::cerr << "\r" << line << std::string(width_ > line.size() ? width_ - line.size() : 0, ' ')
                << std::flush;
      width_ = line.size();
      open_ = true;
    } else {
      if (!force && since < interval_) return;
      std::cerr << text << "\n";
    }
    last_ = now;
  }
  // Ends the status line (a newline on a terminal).
  void Done() {
    if (enabled_ && tty_ && open_) std::cerr << "\n" << std::flush;
    open_ = false;
  }
  static std::string Bar(double fraction, int width = 24) {
    fraction = std::min(1.0, std::max(0.0, fraction));
    const int full = static_cast<int>(std::round(fraction * width));
    return "[" + std::string(full, '#') + std::string(width - full, '.') + "]";
  }

 private:
  bool enabled_, tty_;
  double interval_;
  std::chrono::steady_clock::time_point last_;
  std::size_t width_ = 0;
  bool open_ = false;
};

// ---- plots ----------------------------------------------------------------------
// Full path of `program` on $PATH, or "".
inline std::string FindProgram(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + program;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
inline bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Runs a gnuplot script that writes `output`; throws std::runtime_error when
// gnuplot is missing or fails. `script` must not set the terminal or output.
inline void RunGnuplot(const std::string& script, const std::string& output, int width, int height) {
  const std::string gnuplot = FindProgram("gnuplot");
  if (gnuplot.empty())
    throw std::runtime_error("cannot draw '" + output +
                             "': gnuplot not found on PATH (install the Debian package gnuplot-nox); "
                             "the table, JSON and CSV outputs do not need it");
  const std::string ext = Lower(output);
  std::string terminal;
  if (EndsWith(ext, ".svg")) {
    terminal = "set terminal svg size " + std::to_string(width) + "," + std::to_string(height) +
               " dynamic background rgb 'white'";
  } else if (EndsWith(ext, ".png")) {
    terminal = "set terminal pngcairo size " + std::to_string(width) + "," +
               std::to_string(height) + " font 'sans,10'";
  } else {
    throw std::runtime_error("plot file '" + output + "' must end in .png or .svg");
  }
  char dir_template[] = "/tmp/implicit_plot_XXXXXX";
  if (::mkdtemp(dir_template) == nullptr)
    throw std::runtime_error(std::string("cannot create a temporary directory: ") + std::strerror(errno));
  const std::string dir = dir_template;
  const std::string script_path = dir + "/plot.gp";
  std::string quoted = output;
  std::string escaped;
  for (char c : quoted) escaped += (c == '\'' ? std::string("''") : std::string(1, c));
  WriteTextFile(script_path, terminal + "\nset output '" + escaped + "'\n" + script + "\nset output\n",
                "gnuplot script");
  const std::string log = dir + "/gnuplot.log";
  const std::string command = "'" + gnuplot + "' '" + script_path + "' > '" + log + "' 2>&1";
  const int rc = std::system(command.c_str());
  std::string error;
  if (rc != 0) {
    std::ifstream in(log);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    error = "gnuplot failed (exit " + std::to_string(rc) + ")" + (last.empty() ? "" : ": " + last);
  }
  std::remove(script_path.c_str());
  std::remove(log.c_str());
  ::rmdir(dir.c_str());
  if (!error.empty()) throw std::runtime_error("cannot draw '" + output + "': " + error);
  if (::access(output.c_str(), R_OK) != 0)
    throw std::runtime_error("cannot draw '" + output + "': gnuplot wrote no file");
}

// gnuplot inline data block "$name << EOD ... EOD" from (x, y) pairs; points
// with non-positive or non-finite y (and x, when positive_x) are dropped (log scales).
inline std::string GnuplotData(const std::string& name, const std::vector<double>& x,
                               const std::vector<double>& y, bool positive_x = false) {
  std::ostringstream s;
  s << "$" << name << " << EOD\n";
  s << std::setprecision(10);
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (std::isfinite(x[i]) && std::isfinite(y[i]) && y[i] > 0 && (!positive_x || x[i] > 0)) s << x[i] << " " << y[i] << "\n";
  }
  s << "EOD\n";
  return s.str();
}

inline std::string GnuplotQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '_') out += '\\';  // no subscripts in enhanced text
    out += c;
  }
  return out + "\"";
}

// ---- PNG -------------------------------------------------------------------------
// Writes an 8-bit grayscale PNG (row-major, width*height bytes).
inline void WriteGrayPng(const std::string& path, int width, int height,
                         const std::vector<unsigned char>& pixels) {
  if (width <= 0 || height <= 0 || pixels.size() != static_cast<std::size_t>(width) * height)
    throw std::invalid_argument("WriteGrayPng: pixel buffer does not match the size");
  std::string raw;
  raw.reserve(static_cast<std::size_t>(height) * (width + 1));
  for (int r = 0; r < height; ++r) {
    raw.push_back('\0');  // filter type 0
    raw.append(reinterpret_cast<const char*>(pixels.data()) + static_cast<std::size_t>(r) * width,
               static_cast<std::size_t>(width));
  }
  uLongf compressed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string compressed(compressed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(&compressed[0]), &compressed_size,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 9) != Z_OK)
    throw std::runtime_error("cannot compress PNG data for '" + path + "'");
  compressed.resize(compressed_size);
  auto be32 = [](std::string& s, std::uint32_t v) {
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  std::string png("\x89PNG\r\n\x1a\n", 8);
  auto chunk = [&](const char* type, const std::string& data) {
    be32(png, static_cast<std::uint32_t>(data.size()));
    std::string body = std::string(type, 4) + data;
    png += body;
    be32(png, static_cast<std::uint32_t>(
                  crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
  };
  std::string ihdr;
  be32(ihdr, static_cast<std::uint32_t>(width));
  be32(ihdr, static_cast<std::uint32_t>(height));
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8-bit, grayscale, deflate, no filter, no interlace
  chunk("IHDR", ihdr);
  chunk("IDAT", compressed);
  chunk("IEND", "");
  WriteTextFile(path, png, "PNG image");
}

}  // namespace implicit_apps
