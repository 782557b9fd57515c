// Command lines with CLI11: every option is declared once, with its default
// (shown by --help) and its help text; the checks on its value go with it.
//
//   CLI::App app("What the program does.", "implicit-foo");
//   ConfigureApp(app);
//   double beta = 1.0;
//   app.add_option("--beta", beta, "inverse temperature")->check(Positive());
//   std::vector<std::string> names = {"a", "b"};
//   AddList(app, "--names", &names, "comma-separated names", "all");
//   if (!Parse(app, argc, argv)) return 0;   // --help was printed
//
// Parse errors become a UsageError of one line that names the option (exit
// status 2 through Main, app_main.h): CLI11's own messages ("--beta: 1
// required FLOAT missing", "Could not convert: --beta = abc"), the checks
// below ("--beta: must be > 0, got -1"), "unknown option --frobnicate".
//
// Every option has one of these checks: RealCheck (Positive, AtLeast) for a
// real number, IntIn for an integer (read as a 64-bit value, so 2^32 or 2^63
// is out of range, never wrapped), PathCheck or ExtensionCheck for a file
// name (never empty). Values are quoted in errors through Excerpt (at most 60
// characters).
#pragma once

#include "common/app_main.h"
#include "common/format.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace implicit_apps {

// Defaults shown in --help, flags without values (--quiet=1 is an error),
// unknown arguments collected (Parse reports them).
// Call before adding subcommands, which inherit these settings.
inline void ConfigureApp(CLI::App& app) {
  app.option_defaults()->always_capture_default()->disable_flag_override();
  app.allow_extras();
  app.get_formatter()->column_width(26);
}

// A check on a real-valued option: the value must be a finite number for
// which `ok` holds (`ok` empty: any finite number); `bound` says what `ok`
// asks ("> 0", "in (0, 1)") in errors and --help.
inline CLI::Validator RealCheck(std::function<bool(double)> ok = {}, const std::string& bound = "") {
  return CLI::Validator(
      [ok, bound](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
          return "'" + Excerpt(s) + "' is not a finite number";
        return !ok || ok(v) ? std::string() : "must be " + bound + ", got " + Excerpt(s);
      },
      bound.empty() ? std::string() : "(" + bound + ")");
}
inline CLI::Validator Positive() { return RealCheck([](double v) { return v > 0; }, "> 0"); }
inline CLI::Validator AtLeast(double lo) {
  return RealCheck([lo](double v) { return v >= lo; }, ">= " + Fmt(lo));
}

// A check on a file name option: it must end in one of `extensions` (any case).
inline CLI::Validator ExtensionCheck(const std::vector<std::string>& extensions) {
  std::string names;
  for (std::size_t i = 0; i < extensions.size(); ++i)
    names += (i == 0 ? "" : i + 1 == extensions.size() ? " or " : ", ") + extensions[i];
  return CLI::Validator(
      [extensions, names](std::string& path) {
        if (path.empty()) return "must name a " + names + " file, not be empty";
        for (const std::string& e : extensions)
          if (EndsWith(Lower(path), e) && path.size() > e.size() && path[path.size() - e.size() - 1] != '/')
            return std::string();
        return "must name a " + names + " file, got '" + Excerpt(path) + "'";
      },
      "");
}

// A check on a file name option: not empty (an empty value never means "the
// default"), at most PATH_MAX characters, no NUL byte.
inline CLI::Validator PathCheck() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        if (path.empty()) return "must name a file, not be empty";
        if (path.size() >= 4096) return "file name of " + std::to_string(path.size()) + " characters is too long";
        return std::string();
      },
      "");
}

// A check on an integer option: decimal digits with an optional sign (CLI11
// alone would read 010 as octal and accept 0x10), in lo..hi, read as a 64-bit
// value (2^32 and 2^64 are out of range, not wrapped). Leading zeros are
// dropped before CLI11 converts the value.
inline CLI::Validator IntIn(long long lo, long long hi) {
  const std::string bound = "in " + std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, bound](std::string& s) -> std::string {
        std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
        if (i == s.size() || s.find_first_not_of("0123456789", i) != std::string::npos)
          return "'" + Excerpt(s) + "' is not an integer";
        errno = 0;
        const long long v = std::strtoll(s.c_str(), nullptr, 10);
        if (errno == ERANGE || v < lo || v > hi) return "must be " + bound + ", got " + Excerpt(s);
        s = std::to_string(v);
        return std::string();
      },
      "(" + bound + ")");
}

// Splits a comma-separated list; an empty entry or an empty list is an error
// naming `option`.
inline std::vector<std::string> SplitList(const std::string& option, const std::string& text,
                                          char separator = ',') {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, separator)) {
    if (item.empty()) throw CLI::ValidationError(option, "empty entry in '" + Excerpt(text) + "'");
    out.push_back(item);
  }
  if (out.empty() || text.back() == separator)
    throw CLI::ValidationError(option, "empty entry in '" + Excerpt(text) + "'");
  return out;
}

// An option taking one comma-separated list (given once); *values holds the
// default until then, which --help shows as `default_text`.
inline CLI::Option* AddList(CLI::App& app, const std::string& name, std::vector<std::string>* values,
                            const std::string& help, const std::string& default_text) {
  return app
      .add_option_function<std::string>(
          name, [values, name](const std::string& text) { *values = SplitList(name, text); }, help)
      ->type_name("LIST")
      ->default_str(default_text);
}

// Parses a comma-separated list of numbers with `check` applied to each.
template <typename T>
std::vector<T> ParseNumbers(const std::string& option, const std::vector<std::string>& items,
                            const CLI::Validator& check) {
  std::vector<T> out;
  for (std::string item : items) {
    const std::string error = check(item);
    if (!error.empty()) throw UsageError(option + ": " + error);
    T v{};
    CLI::detail::lexical_cast(item, v);
    out.push_back(v);
  }
  return out;
}

// The first argument no option or subcommand took, as a UsageError.
inline void CheckNoneLeft(const CLI::App& app) {
  const std::vector<std::string> rest = app.remaining(true);
  if (rest.empty()) return;
  const std::string& a = rest.front();
  if (a.size() > 1 && a[0] == '-') throw UsageError("unknown option " + Excerpt(a.substr(0, a.find('='))));
  const std::vector<const CLI::App*> subcommands = app.get_subcommands([](const CLI::App*) { return true; });
  if (!subcommands.empty() && app.get_subcommands().empty()) {
    std::vector<std::string> names;
    for (const CLI::App* s : subcommands) names.push_back(s->get_name());
    throw UsageError("unknown subcommand '" + Excerpt(a) + "' (available: " + JoinNames(names) + ")");
  }
  throw UsageError("unexpected argument '" + Excerpt(a) + "'");
}

// Parses the command line. Returns false after printing the help (--help);
// throws UsageError (one line, naming the option) for a bad command line.
inline bool Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return false;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return false;
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "float was given a disallowed flag override" for --float=1.
    std::string message = e.what();
    const std::string override_text = " was given a disallowed flag override";
    if (EndsWith(message, override_text))
      message = "option --" + message.substr(0, message.size() - override_text.size()) + " takes no value";
    throw UsageError(message);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  CheckNoneLeft(app);
  return true;
}

}  // namespace implicit_apps
