// A progress line on stderr.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>

namespace implicit_apps {

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

}  // namespace implicit_apps
