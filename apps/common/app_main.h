// The frame of every command-line program: one-line errors and exit statuses.
//
//   int main(int argc, char** argv) {
//     return implicit_apps::Main("implicit-foo", [&] { return Run(argc, argv); });
//   }
//
// Every error ends the program with one line "implicit-foo: error: ..." and a
// non-zero exit status: 2 for a bad command line (UsageError, which CLI11's
// own parse errors become, see cli.h), 1 for everything else (files, data).
#pragma once

#include <exception>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace implicit_apps {

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

// Runs `body`, turning any exception into one line on stderr and an exit code.
inline int Main(const char* program, const std::function<int()>& body) {
  KeepFreedMemory();
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << program << ": error: " << OneLine(e.what()) << " (see " << program << " --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << OneLine(e.what()) << "\n";
    return 1;
  } catch (...) {
    std::cerr << program << ": error: unknown failure\n";
    return 1;
  }
}

}  // namespace implicit_apps
