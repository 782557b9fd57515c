// JSON output with nlohmann-json. Objects keep their fields in the order they
// were set (ordered_json); inf and nan are written as null (JSON has neither).
//
//   Json o;
//   o["problem"] = "rbm";
//   o["residual"] = 1e-9;
//   WriteJsonFile(path, o, "--json");
#pragma once

#include "common/output_files.h"

#include <nlohmann/json.hpp>

#include <string>

namespace implicit_apps {

using Json = nlohmann::ordered_json;

// The text of `j`, indented; invalid UTF-8 in strings (e.g. from file names)
// is replaced rather than thrown on.
inline std::string JsonText(const Json& j) {
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

inline void WriteJsonFile(const std::string& path, const Json& j, const std::string& what) {
  WriteTextFile(path, JsonText(j), what);
}

}  // namespace implicit_apps
