// Helpers for the end-to-end tests of the command-line programs: run a
// command and capture its exit status, stdout and stderr; a small JSON reader
// for the files the programs write.
//
//   implicit::testing::CommandResult r = implicit::testing::RunCommand("prog --json out.json");
//   implicit::testing::Json j = implicit::testing::ParseJson(ReadFile("out.json"));
//   for (const Json& row : j["results"].array) { row["status"].string ... }
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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
struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject } type = kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  bool Has(const std::string& key) const { return type == kObject && object.count(key) > 0; }
  const Json& operator[](const std::string& key) const {
    auto it = object.find(key);
    if (type != kObject || it == object.end()) throw std::runtime_error("JSON: no field '" + key + "'");
    return it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  Json Parse() {
    Json v = Value();
    Space();
    if (p_ != s_.size()) Fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw std::runtime_error("JSON parse error at byte " + std::to_string(p_) + ": " + what);
  }
  void Space() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_]))) ++p_;
  }
  bool Eat(char c) {
    Space();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Eat(c)) Fail(std::string("expected '") + c + "'");
  }
  std::string String() {
    Expect('"');
    std::string out;
    while (p_ < s_.size() && s_[p_] != '"') {
      char c = s_[p_++];
      if (c == '\\') {
        if (p_ >= s_.size()) Fail("bad escape");
        const char e = s_[p_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': {
            if (p_ + 4 > s_.size()) Fail("bad \\u escape");
            const unsigned code = static_cast<unsigned>(std::stoul(s_.substr(p_, 4), nullptr, 16));
            p_ += 4;
            out += code < 0x80 ? static_cast<char>(code) : '?';
            break;
          }
          default: out += e;
        }
      } else {
        out += c;
      }
    }
    if (p_ >= s_.size()) Fail("unterminated string");
    ++p_;
    return out;
  }
  Json Value() {
    Space();
    if (p_ >= s_.size()) Fail("unexpected end");
    Json v;
    const char c = s_[p_];
    if (c == '{') {
      ++p_;
      v.type = Json::kObject;
      if (Eat('}')) return v;
      do {
        Space();
        std::string key = String();
        Expect(':');
        v.object[key] = Value();
      } while (Eat(','));
      Expect('}');
    } else if (c == '[') {
      ++p_;
      v.type = Json::kArray;
      if (Eat(']')) return v;
      do {
        v.array.push_back(Value());
      } while (Eat(','));
      Expect(']');
    } else if (c == '"') {
      v.type = Json::kString;
      v.string = String();
    } else if (s_.compare(p_, 4, "true") == 0) {
      v.type = Json::kBool;
      v.boolean = true;
      p_ += 4;
    } else if (s_.compare(p_, 5, "false") == 0) {
      v.type = Json::kBool;
      p_ += 5;
    } else if (s_.compare(p_, 4, "null") == 0) {
      p_ += 4;
    } else {
      const char* begin = s_.c_str() + p_;
      char* end = nullptr;
      v.number = std::strtod(begin, &end);
      if (end == begin) Fail("unexpected character");
      v.type = Json::kNumber;
      p_ += static_cast<std::size_t>(end - begin);
    }
    return v;
  }
  const std::string& s_;
  std::size_t p_ = 0;
};

inline Json ParseJson(const std::string& text) { return JsonParser(text).Parse(); }

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

// The statuses the apps write for a run (implicit::TerminationTypeToString
// names, plus "skipped" for a solver that does not apply to a problem).
inline const std::set<std::string>& RunStatuses() {
  static const std::set<std::string> statuses = {
      "converged", "max_iterations", "diverged", "non_finite", "stalled",
      "user_abort", "invalid_input", "failure", "skipped"};
  return statuses;
}

}  // namespace testing
}  // namespace implicit
