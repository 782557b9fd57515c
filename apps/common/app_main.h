// The frame of every command-line program: one-line errors and exit statuses.
//
//   int main(int argc, char** argv) {
//     return implicit_apps::Main("implicit-foo", [&] { return Run(argc, argv); });
//   }
//
// Every error ends the program with one line "implicit-foo: error: ..." and a
// non-zero exit status: 2 for a bad command line (UsageError, which CLI11's
// own parse errors become, see cli.h), 1 for everything else (files, data);
// 3 (kDivergedExitStatus) for a finished run in which a training diverged.
#pragma once

#include <algorithm>
#include <exception>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace implicit_apps {

// A run that finished and wrote its results, but where some training
// diverged (stopped at a non-finite loss or score and was reported with its
// best epoch's parameters): implicit-graph's exit status then.
inline constexpr int kDivergedExitStatus = 3;

// A bad command line (exit status 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws UsageError(message) unless `ok`.
inline void Require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

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

// The message on one line (newlines become "; ").
inline std::string OneLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("; ") : std::string(1, c);
  return out;
}

// A message fit for one short line, whatever input it quotes: every quoted
// part ('...') longer than `max` characters is cut to its first `max`
// followed by "...", control characters become '?', and the whole is cut at
// 4 `max` characters. (A library error may quote a whole input line.)
inline std::string ShortenQuoted(const std::string& text, std::size_t max = 160) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t open = text.find('\'', i);
    if (open == std::string::npos) {
      out += text.substr(i);
      break;
    }
    out += text.substr(i, open - i + 1);
    const std::size_t close = std::min(text.find('\'', open + 1), text.size());
    const std::string inner = text.substr(open + 1, close - open - 1);
    out += inner.size() > max ? inner.substr(0, max) + "..." : inner;
    if (close < text.size()) out += '\'';
    i = close + 1;
  }
  if (out.size() > 4 * max) out = out.substr(0, 4 * max) + "...";
  for (char& c : out)
    if ((static_cast<unsigned char>(c) < 32 && c != '\t') || c == 127) c = '?';
  return out;
}

// Runs `body`, turning any exception into one line on stderr and an exit code.
inline int Main(const char* program, const std::function<int()>& body) {
  KeepFreedMemory();
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << program << ": error: " << ShortenQuoted(OneLine(e.what())) << " (see " << program << " --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << ShortenQuoted(OneLine(e.what())) << "\n";
    return 1;
  } catch (...) {
    std::cerr << program << ": error: unknown failure\n";
    return 1;
  }
}

}  // namespace implicit_apps
