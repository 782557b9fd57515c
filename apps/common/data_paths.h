// Where the shipped data is found: --data, $IMPLICIT_DATA_DIR, the source
// tree, next to the installed program, or the configured install prefix: the
// digits and the graphs of data/graphs.
#pragma once

#include <implicit/core/digits.h>
#include <implicit/core/graph_data.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {

// The directory holding the running executable ("" when unknown).
inline std::string ExecutableDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<std::size_t>(n));
  const std::size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

// Where the shipped data is looked for, in order: $IMPLICIT_DATA_DIR, the
// source tree's data/ (compile definition IMPLICIT_APPS_SOURCE_DATA_DIR), the
// installed share/implicit next to the executable, and the configured install
// prefix's share/implicit (IMPLICIT_APPS_INSTALL_DATA_DIR).
inline std::vector<std::string> DataDirectories() {
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
  return dirs;
}

// The digits file: `--data PATH` (a file, or a directory holding
// digits.csv.gz) when given, else the first hit in DataDirectories().
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
    // A FIFO or a device would block or never end: only regular files.
    if (::stat(data_option.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw std::runtime_error("--data: cannot read '" + data_option + "': not a regular file");
    return data_option;  // LoadDigits reports a missing or unreadable file
  }
  const std::vector<std::string> dirs = DataDirectories();
  const std::string found = implicit::FindDataFile(name, dirs);
  if (found.empty()) {
    std::string list;
    for (const auto& d : dirs) list += (list.empty() ? "" : ", ") + d;
    throw std::runtime_error("cannot find " + name + " (looked in " + list + "); pass --data PATH");
  }
  return found;
}

// Loads the digits that `data_option` (--data) names or the search finds;
// errors about a file given with --data start with "--data: ".
inline implicit::DigitsDataset LoadDigitsOption(const std::string& data_option) {
  const std::string path = FindDigits(data_option);
  try {
    return implicit::LoadDigits(path);
  } catch (const std::exception& e) {
    if (data_option.empty()) throw;
    throw std::runtime_error("--data: " + std::string(e.what()));
  }
}

// The shipped graph NAME (NAME.nodes.csv.gz and NAME.edges.csv.gz in graphs/
// of DataDirectories()); errors start with `option`.
inline implicit::GraphDataset LoadShippedGraph(const std::string& name, const std::string& option) {
  std::vector<std::string> dirs;
  std::string list;
  for (const std::string& dir : DataDirectories()) {
    dirs.push_back(dir + "/graphs");
    list += (list.empty() ? "" : ", ") + dirs.back();
  }
  auto find = [&](const std::string& part) {
    const std::string file = name + "." + part + ".csv.gz";
    const std::string found = implicit::FindDataFile(file, dirs);
    if (found.empty()) throw std::runtime_error(option + ": cannot find " + file + " (looked in " + list + ")");
    return found;
  };
  return implicit::LoadGraph(find("nodes"), find("edges"));
}

}  // namespace implicit_apps
