// Plots drawn by gnuplot (optional at run time: a missing gnuplot is an
// error only for the plot itself).
#pragma once

#include "common/format.h"
#include "common/output_files.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {

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

}  // namespace implicit_apps
