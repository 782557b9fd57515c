// Helpers for the end-to-end tests of the command-line programs: run a
// command and capture its exit status, stdout and stderr (or start it in the
// background, to kill it); hash the files a run must not change; read the
// JSON files the programs write (nlohmann-json).
//
//   implicit::testing::CommandResult r = implicit::testing::RunCommand("prog --json out.json");
//   implicit::testing::Json j = implicit::testing::ReadJson("out.json");
//   for (const Json& row : j.at("results")) { row.at("status").get<std::string>() ... }
#pragma once

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct CommandResult {
  int exit_code = -1;     // the program's exit status; -1 when it died from a signal
  int signal = 0;         // the signal that killed it (0: none)
  std::string out, err;   // captured stdout and stderr
};

// A temporary directory removed (with its plain files) at scope exit.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char name[] = "/tmp/implicit_apps_test_XXXXXX";
    if (mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = name;
  }
  ~ScratchDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string File(const std::string& name) const { return path + "/" + name; }
};

// FNV-1a 64 of a file's bytes as hex; "missing" when it cannot be read (what
// the tests compare before and after a run to show a file was not changed).
inline std::string FileHash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "missing";
  std::uint64_t h = 14695981039346656037ULL;
  char buffer[1 << 14];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buffer[i]);
      h *= 1099511628211ULL;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// Quotes `s` for /bin/sh ('...', with ' as '\'').
inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Starts `command` through /bin/sh -c in the background (exec, so the pid is
// the program's own once the shell has exec'd), stdout and stderr to
// `output`; returns its pid (waitpid it, or kill it).
inline pid_t StartCommand(const std::string& command, const std::string& output) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const std::string line = "exec " + command + " > " + ShellQuote(output) + " 2>&1";
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// True in a sanitizer build (IMPLICIT_SANITIZE): the longest end-to-end runs
// take smaller sizes there (the same code paths and checks, fewer steps), which
// keeps the -O0 instrumented pass of CI short.
#ifdef IMPLICIT_TEST_SANITIZED
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// Starts `command` (StartCommand), sends it SIGKILL after `seconds` and waits
// for it. Returns true when the signal ended it (false: it had finished).
inline bool RunKilledAfter(const std::string& command, double seconds, const std::string& output) {
  const pid_t pid = StartCommand(command, output);
  usleep(static_cast<useconds_t>(seconds * 1e6));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

// RunKilledAfter for a run writing into `dir` that should be killed mid-run:
// when it finished before `seconds` (the machine ran it faster than the
// reference run it was timed from), the directory is emptied and the run
// started again, killed after half the time, up to four times in all.
// Returns whether the last run was killed.
inline bool RunKilledMidRun(const std::string& command, double seconds, const ScratchDir& dir,
                            const std::string& log_name) {
  for (int attempt = 0; attempt < 4; ++attempt, seconds *= 0.5) {
    if (attempt > 0) std::system(("find '" + dir.path + "' -mindepth 1 -delete").c_str());
    if (RunKilledAfter(command, seconds, dir.File(log_name))) return true;
  }
  return false;
}

// The names of the files in `dir` that look like a checkpoint writer's
// temporaries (<path>.tmp.<pid>.XXXXXX).
inline std::vector<std::string> TemporaryFiles(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) throw std::runtime_error("cannot list " + dir);
  while (const dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name.find(".tmp.") != std::string::npos) names.push_back(name);
  }
  closedir(d);
  return names;
}

// Runs `command` through /bin/sh with stdout and stderr captured.
inline CommandResult RunCommand(const std::string& command) {
  ScratchDir dir;
  const std::string out = dir.File("out"), err = dir.File("err");
  const int status = std::system((command + " > '" + out + "' 2> '" + err + "'").c_str());
  CommandResult r;
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    // /bin/sh reports a child killed by signal s as exit status 128 + s.
    if (r.exit_code > 128 && r.exit_code < 160) r.signal = r.exit_code - 128;
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

// ---- JSON ----------------------------------------------------------------------
// The programs write JSON with nlohmann-json; the tests read it with the same
// library (j.at("results"), row.at("status").get<std::string>()).
using Json = nlohmann::json;

inline Json ReadJson(const std::string& path) { return Json::parse(ReadFile(path)); }

// The lines of a text (non-empty ones).
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (char c : text) {
    if (c != '\n') {
      line += c;
    } else if (!line.empty()) {
      lines.push_back(line);
      line.clear();
    }
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// The problems `app` (implicit-compare or implicit-bench) has registered, from
// `app --list-problems`: what the tests iterate over instead of a list of
// their own.
inline std::vector<std::string> RegisteredProblems(const std::string& app) {
  const CommandResult r = RunCommand(app + " --list-problems");
  if (r.exit_code != 0) throw std::runtime_error(app + " --list-problems failed: " + r.err);
  return Lines(r.out);
}

// Number of non-empty lines of a text.
inline int CountLines(const std::string& text) {
  int n = 0;
  bool in_line = false;
  for (char c : text) {
    if (c == '\n') {
      n += in_line;
      in_line = false;
    } else {
      in_line = true;
    }
  }
  return n + in_line;
}

// Runs `command` expecting it to fail on bad input: not a signal, exit status
// `status` (any non-zero one when -1), and one line on stderr holding
// "<program>: error" (just "error" when `program` is empty) and `expect`.
inline void ExpectOneLineError(const std::string& command, const std::string& expect, int status = -1,
                               const std::string& program = "") {
  const CommandResult r = RunCommand(command);
  BOOST_TEST_CONTEXT("command: " << command << "\nstderr: " << r.err) {
    BOOST_TEST(r.signal == 0);
    if (status < 0) {
      BOOST_TEST(r.exit_code > 0);
    } else {
      BOOST_TEST(r.exit_code == status);
    }
    BOOST_TEST(CountLines(r.err) == 1);
    BOOST_TEST(r.err.find(program.empty() ? "error" : program + ": error") != std::string::npos);
    BOOST_TEST(r.err.find(expect) != std::string::npos);
  }
}

// The statuses the apps write for a run (implicit::TerminationTypeToString
// names, plus "skipped" for a solver that does not apply to a problem).
inline const std::set<std::string>& RunStatuses() {
  static const std::set<std::string> statuses = {
      "converged", "max_iterations", "diverged", "non_finite", "stalled",
      "user_abort", "invalid_input", "failure", "skipped"};
  return statuses;
}

// `mpirun -np 2 --oversubscribe ` (allowed as root) when the test program was
// compiled with IMPLICIT_MPIEXEC (test/apps/CMakeLists.txt sets it in a build
// with MPI), else "".
inline std::string MpirunTwoRanks() {
#ifdef IMPLICIT_MPIEXEC
  return std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") + IMPLICIT_MPIEXEC +
         " -np 2 --oversubscribe ";
#else
  return "";
#endif
}

// Precondition of the mpirun tests: reported as skipped, with the reason,
// in a build without MPI.
struct MpiPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    const bool present = !MpirunTwoRanks().empty();
    if (!present) std::cout << "SKIPPED: the mpirun tests need a build with MPI (IMPLICIT_WITH_MPI)" << std::endl;
    return present;
  }
};

}  // namespace testing
}  // namespace implicit
