// Writing the programs' output files, with errors that name the option.
//
// Every output a user asks for is written, or the run ends with exit status 1
// naming the file that was not: CheckWritable fails early (before a long run)
// on a path that cannot be written (a directory, a missing or unwritable
// directory, an unwritable file); CheckDistinctFiles rejects two outputs on
// the same file, or an output on an input; Outputs writes each output in turn,
// goes on past a failure and then reports every file that was not written.
//
//   CheckWritable(o.json, "--json");                      // after parsing
//   Outputs outputs;
//   outputs.Write("--json", o.json, [&] { WriteJsonFile(o.json, j, "--json"); });
//   outputs.Finish();                                     // throws if one failed
#pragma once

#include "common/app_main.h"
#include "common/format.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit_apps {

// Writes `text` to `path`; `what` (e.g. "--json") names the file in errors:
// "--json: cannot write 'out.json': No space left on device".
inline void WriteTextFile(const std::string& path, const std::string& text, const std::string& what) {
  auto fail = [&](int error) {
    throw std::runtime_error(what + ": cannot write '" + path + "': " + std::strerror(error));
  };
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail(EISDIR);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(errno);
  out << text;
  out.close();
  if (!out) fail(errno != 0 ? errno : EIO);
}

// The directory part of `path` ("." for a bare name).
inline std::string DirectoryOf(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Fails early (before a long run) when `path` cannot be created or replaced:
// it must not be a directory (or end in '/'), an existing file must be
// writable (and a regular file when `regular_only`: a checkpoint is replaced
// by renaming, which must never hit a device), and its directory must exist
// and be writable. An empty path (output not asked for) passes.
inline void CheckWritable(const std::string& path, const std::string& what, bool regular_only = false) {
  if (path.empty()) return;
  const std::string prefix = what + ": cannot write '" + path + "': ";
  if (path.back() == '/') throw std::runtime_error(prefix + "names a directory");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw std::runtime_error(prefix + "is a directory");
    if (regular_only && !S_ISREG(st.st_mode)) throw std::runtime_error(prefix + "is not a regular file");
    if (::access(path.c_str(), W_OK) != 0)
      throw std::runtime_error(prefix + "the file is not writable: " + std::strerror(errno));
  }
  const std::string dir = DirectoryOf(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(prefix + "directory '" + dir + "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0)
    throw std::runtime_error(prefix + "directory '" + dir + "' is not writable");
}

// Whether `a` and `b` name the same file (the same inode when both exist).
inline bool SameFile(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return a == b;
}

// (option, path) pairs; an empty path is an output not asked for.
using FileOptions = std::vector<std::pair<std::string, std::string>>;

// UsageError when two outputs name the same file, or an output names one of
// the `inputs` (writing it would overwrite what the run reads).
inline void CheckDistinctFiles(const FileOptions& outputs, const FileOptions& inputs = {}) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (SameFile(outputs[i].second, outputs[j].second))
        throw UsageError(outputs[i].first + ": '" + Excerpt(outputs[i].second, 160) + "' is also the " +
                         outputs[j].first + " file");
    for (const auto& input : inputs)
      if (SameFile(outputs[i].second, input.second))
        throw UsageError(outputs[i].first + ": '" + Excerpt(outputs[i].second, 160) + "' is the " + input.first +
                         " input; writing it would overwrite it");
  }
}

// The outputs of a run: each written in turn; a failure is recorded and the
// others are still written; Finish() then throws one error naming every file
// that was not written (exit status 1).
class Outputs {
 public:
  // Runs `write`, which writes `path` (the output of `option`); nothing for
  // an empty path.
  void Write(const std::string& option, const std::string& path, const std::function<void()>& write) {
    if (path.empty()) return;
    try {
      write();
    } catch (const std::exception& e) {
      const std::string message = e.what();
      failures_.push_back(message.compare(0, option.size() + 1, option + ":") == 0 ? message
                                                                                  : option + ": " + message);
    }
  }
  bool ok() const { return failures_.empty(); }
  void Finish() const {
    if (failures_.empty()) return;
    std::string message;
    for (const std::string& f : failures_) message += (message.empty() ? "" : "; ") + f;
    throw std::runtime_error(message);
  }

 private:
  std::vector<std::string> failures_;
};

}  // namespace implicit_apps
