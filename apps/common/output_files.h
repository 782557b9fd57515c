// Writing the programs' output files, with errors that name the option.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

namespace implicit_apps {

// Writes `text` to `path`; `what` (e.g. "--json") names the file in errors.
inline void WriteTextFile(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + what + " '" + path + "': " + std::strerror(errno));
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + what + " '" + path + "': " + std::strerror(errno));
}

// Fails early (before a long run) when `path` cannot be created: its directory
// must exist and be writable. An empty path (output not asked for) passes.
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

}  // namespace implicit_apps
