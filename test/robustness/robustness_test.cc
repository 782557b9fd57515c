// The robustness suite (ctest -L robustness): bad input and faults against
// every program, as a table of cases. For every app, every numeric flag gets
// non-numeric, empty, fractional, overflowing (2^32, 2^63, 2^64, 1e400), nan,
// inf and out-of-range values; every file argument a missing file, an empty
// one, a directory, a FIFO, a truncated, binary or foreign file, one with a
// 1 MB line (and an unreadable one: run as the unprivileged user nobody when
// the suite runs as root, which file permissions do not stop); every output a
// directory, a missing directory, an empty name, an input's name, a full
// device. Each case asserts the exit status (2: bad arguments, 1: files), the
// one short line "implicit-X: error: ..." naming the flag or file, and that
// the user's files (data, checkpoints, results) are unchanged.
//
// Then the faults: a process SIGKILLed while writing a checkpoint and
// restarted (the previous checkpoint intact, no temporary file left), a
// diverged training run (it fails and keeps the last good checkpoint; resuming
// from that works), a checkpoint already at --steps, stale temporary files.
//
// Every case fails at argument or file validation, or runs a tiny problem, and
// the cases run two at a time, so that the suite takes seconds (scripts/test.sh
// runs it in the Release build, about 2 minutes, and in the sanitizer build,
// about 4 minutes on the 2-core machine).
#define BOOST_TEST_MODULE robustness
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "support/app_runner.h"

#include <implicit/core/checkpoint.h>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

using implicit::testing::CommandResult;
using implicit::testing::CountLines;
using implicit::testing::FileHash;
using implicit::testing::Json;
using implicit::testing::ReadFile;
using implicit::testing::RunCommand;
using implicit::testing::ShellQuote;

namespace {

const std::string kCompare = IMPLICIT_APP_COMPARE, kHopfield = IMPLICIT_APP_HOPFIELD, kEt = IMPLICIT_APP_ET,
                  kBench = IMPLICIT_APP_BENCH, kGraph = IMPLICIT_APP_GRAPH;

// ---- the scratch directory and the user's files --------------------------------------
// @D in a case's command is the scratch directory, @DATA the user's digits
// file (a copy of data/digits.csv.gz); @D/user holds the files no case may
// change; @D/out takes what the runs write.

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string Run(const std::string& command) {
  const CommandResult r = RunCommand(command);
  if (r.exit_code != 0) throw std::runtime_error("set-up failed: " + command + ": " + r.err);
  return r.out;
}

// The small implicit-et model every et case uses (without --data etc.).
std::map<std::string, std::string> EtBase() {
  return {{"--steps", "1"},       {"--batch", "2"},      {"--holdout", "20"},   {"--dim", "4"},
          {"--pos-dim", "2"},     {"--heads", "1"},      {"--head-dim", "2"},   {"--memories", "4"},
          {"--max-iter", "20"},   {"--tol", "1e-4"},     {"--threads", "1"},    {"--checkpoint", "@D/out/run.ckpt"},
          {"--image", "@D/out/run.png"}};
}

// " --flag value ..." of `args` but the flags `without`.
std::string Join(const std::map<std::string, std::string>& args, const std::vector<std::string>& without = {}) {
  std::string s;
  for (const auto& [flag, value] : args)
    if (std::find(without.begin(), without.end(), flag) == without.end()) s += " " + flag + " " + value;
  return s;
}

struct Scratch {
  std::string dir;
  Scratch() {
    char name[] = "/tmp/implicit_robustness_XXXXXX";
    if (mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = name;
    for (const char* sub : {"/user", "/out", "/adir", "/adir.png", "/ro"}) ::mkdir((dir + sub).c_str(), 0755);
    // The cases that need an unprivileged user run as nobody when the suite
    // runs as root (AsUnprivileged): it must reach the files and write out/.
    ::chmod(dir.c_str(), 0755);
    ::chmod((dir + "/out").c_str(), 0777);
    const std::string digits = ReadFile(std::string(IMPLICIT_DATA_DIR) + "/digits.csv.gz");
    WriteBytes(dir + "/user/digits.csv.gz", digits);
    WriteBytes(dir + "/user/keep.json", "{\"mine\": true}\n");
    // A small graph for implicit-graph (8 nodes, 3 anomalous).
    WriteBytes(dir + "/user/g.nodes.csv", "# label,x0,x1\n0,0,1\n0,1,0\n1,5,5\n0,0,0\n1,6,4\n0,1,1\n1,5,6\n0,0,1\n");
    WriteBytes(dir + "/user/g.edges.csv", "# source,target\n0,1\n1,2\n2,3\n4,5\n6,7\n");
    // Bad data files.
    WriteBytes(dir + "/empty.csv", "");
    WriteBytes(dir + "/truncated.csv.gz", digits.substr(0, digits.size() / 2));
    std::mt19937 gen(7);
    std::string binary(4096, '\0');
    for (char& c : binary) c = static_cast<char>(gen() & 0xff);
    WriteBytes(dir + "/binary.bin", binary);
    WriteBytes(dir + "/hugeline.csv", std::string(1 << 20, '7') + "\n");
    WriteBytes(dir + "/hugefield.csv", "1," + std::string(1 << 20, 'x') + "\n");
    WriteBytes(dir + "/wrongcols.csv", "1,2,3\n");
    std::string row;
    for (int i = 0; i < 64; ++i) row += "99,";
    WriteBytes(dir + "/badpixel.csv", row + "3\n");
    ::mkfifo((dir + "/fifo").c_str(), 0644);
    WriteBytes(dir + "/ro/keep.txt", "x");
    ::chmod((dir + "/ro").c_str(), 0555);
    WriteBytes(dir + "/unreadable.csv", "1,2\n");
    ::chmod((dir + "/unreadable.csv").c_str(), 0000);
    // A good checkpoint of the small et model (step 2), then variations.
    Run("cd " + ShellQuote(dir) + " && " + Expand(kEt + " --quiet" + Join(EtBase(), {"--steps", "--checkpoint"}) +
                                                   " --steps 2 --data @DATA --checkpoint @D/user/good.ckpt"));
    const std::string good = ReadFile(dir + "/user/good.ckpt");
    WriteBytes(dir + "/cut.ckpt", good.substr(0, good.size() / 2));
    std::string flipped = good;
    flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x40);
    WriteBytes(dir + "/flip.ckpt", flipped);
    WriteBytes(dir + "/hugeline.ckpt", std::string(1 << 20, 'x') + "\n");
    Variant(good, "otherdim.ckpt", [](implicit::Checkpoint& c) {
      std::string& k = c.metadata["config"];
      k.replace(k.find("dim=4"), 5, "dim=6");
    });
    Variant(good, "float.ckpt", [](implicit::Checkpoint& c) { c.metadata["precision"] = "float"; });
    Variant(good, "otherdata.ckpt", [](implicit::Checkpoint& c) { c.metadata["data"] = "100 training digits"; });
    Variant(good, "foreign.ckpt", [](implicit::Checkpoint& c) { c.metadata.clear(); });
    Variant(good, "negstep.ckpt", [](implicit::Checkpoint& c) { c.step = -5; });
    Variant(good, "nan.ckpt", [](implicit::Checkpoint& c) {
      implicit::ParameterSet<double> p;
      for (const auto& t : c.Parameters("model")) p.Add(t.name, t.rows, t.cols);
      c.RestoreParameters("model", &p);
      p.values()(0) = std::nan("");
      c.AddParameters("model", p);
    });
  }
  ~Scratch() {
    ::chmod((dir + "/ro").c_str(), 0755);
    std::system(("rm -rf " + ShellQuote(dir)).c_str());
  }
  template <typename Edit>
  void Variant(const std::string& good, const std::string& name, Edit edit) {
    implicit::Checkpoint c = implicit::Checkpoint::Deserialize(good);
    edit(c);
    implicit::SaveCheckpoint(dir + "/" + name, c);
  }
  std::string Expand(std::string s) const {
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::string>>{{"@DATA", dir + "/user/digits.csv.gz"}, {"@D", dir}}) {
      for (std::size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size()))
        s.replace(at, key.size(), value);
    }
    return s;
  }
  // Hashes of every file in user/ (what no case may change).
  std::map<std::string, std::string> UserFiles() const {
    std::map<std::string, std::string> hashes;
    if (DIR* d = ::opendir((dir + "/user").c_str())) {
      while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') hashes[e->d_name] = FileHash(dir + "/user/" + e->d_name);
      ::closedir(d);
    }
    return hashes;
  }
  std::vector<std::string> FilesIn(const std::string& sub) const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir((dir + "/" + sub).c_str())) {
      while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') names.push_back(e->d_name);
      ::closedir(d);
    }
    return names;
  }
};

Scratch& Env() {
  static Scratch scratch;
  return scratch;
}

bool Root() { return ::geteuid() == 0; }

// Running as root, whom file permissions do not stop, the cases that need
// them to bind (unreadable inputs, unwritable directories) run as the user
// nobody through util-linux's setpriv. "" when that works (checked once with a
// program's --help), else why those cases are skipped.
const char* const kUnprivileged = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
const std::string& WhyNotUnprivileged() {
  static const std::string why = [] {
    if (::access("/usr/bin/setpriv", X_OK) != 0) return std::string("/usr/bin/setpriv is missing (util-linux)");
    const std::string probe = std::string("/usr/bin/") + kUnprivileged + kCompare + " --help > /dev/null 2>&1";
    if (std::system(probe.c_str()) != 0)
      return std::string("the user nobody cannot run ") + kCompare + " (a directory on its path closed to others?)";
    return std::string();
  }();
  return why;
}
// Whether case c cannot run here: it needs permissions to bind, the suite runs
// as root and cannot run it as nobody.
bool SkippedAsRoot(bool needs_non_root) { return needs_non_root && Root() && !WhyNotUnprivileged().empty(); }

// ---- the table of cases ----------------------------------------------------------
struct Case {
  std::string name;     // what is tried, for the report
  std::string program;  // "implicit-compare", ...
  std::string command;  // shell command line, with @D and @DATA
  int status = 2;       // the exit status expected
  std::vector<std::string> expect;  // texts the one error line holds
  bool needs_non_root = false;      // permissions do not bind root: skipped then
  std::size_t index = 0;            // position in the table
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.program << ": " << c.name; }

std::string ProgramName(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// One numeric (or list) flag and the values just outside its range.
struct Flag {
  std::string name;
  char kind;  // 'i' integer, 'r' real, 'I' list of integers, 'R' list of reals
  std::vector<std::string> outside;  // in-type values outside the range
};

// The bad values of a flag's kind: non-numeric, empty, fractional,
// overflowing, nan and inf, and its own out-of-range values.
std::vector<std::string> BadValues(const Flag& f) {
  std::vector<std::string> v;
  switch (f.kind) {
    case 'i':
      v = {"abc", "''", "2.5", "0x10", "4294967296", "9223372036854775808", "18446744073709551616", "1e400",
           "nan", "inf", "-9223372036854775809"};
      break;
    case 'r':
      v = {"abc", "''", "1e400", "-1e400", "nan", "inf", "-inf", "1,2", "0x1p2000"};
      break;
    case 'I':
      v = {"4,,8", "4,abc", "4,4294967296", "4,2.5", "''", "4,"};
      break;
    case 'R':
      v = {"1,,2", "1,nan", "1,1e400", "1,inf", "1,abc", "''"};
      break;
  }
  v.insert(v.end(), f.outside.begin(), f.outside.end());
  return v;
}

// Flag cases of `app` (with `sub`command): each bad value of each flag on a
// command line that is otherwise `base` (tiny), expecting exit 2 and
// "<program>: error: <flag>:".
void AddFlagCases(std::vector<Case>* cases, const std::string& app, const std::string& sub,
                  const std::map<std::string, std::string>& base, const std::vector<Flag>& flags) {
  const std::string program = ProgramName(app);
  for (const Flag& f : flags) {
    for (const std::string& value : BadValues(f)) {
      Case c;
      c.program = program;
      c.name = (sub.empty() ? "" : sub + " ") + f.name + " " + value;
      c.command = app + (sub.empty() ? "" : " " + sub) + " --quiet" + Join(base, {f.name}) + " " + f.name + " " + value;
      c.expect = {program + ": error: " + f.name + ":"};
      cases->push_back(c);
    }
  }
}

Case Make(const std::string& app, const std::string& name, const std::string& command, int status,
          std::vector<std::string> expect, bool needs_non_root = false) {
  Case c;
  c.program = ProgramName(app);
  c.name = name;
  c.command = app + " " + command;
  c.status = status;
  c.expect = std::move(expect);
  c.needs_non_root = needs_non_root;
  return c;
}

// The cases of a --data option on `app` + `args` (where the data is read first).
void AddDataCases(std::vector<Case>* cases, const std::string& app, const std::string& args) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"missing", "@D/missing.csv.gz"}, {"empty", "@D/empty.csv"},         {"directory", "@D/adir"},
      {"fifo", "@D/fifo"},              {"truncated", "@D/truncated.csv.gz"}, {"binary", "@D/binary.bin"},
      {"1 MB line", "@D/hugeline.csv"}, {"1 MB field", "@D/hugefield.csv"}, {"wrong columns", "@D/wrongcols.csv"},
      {"pixel out of range", "@D/badpixel.csv"}, {"a checkpoint", "@D/user/good.ckpt"}};
  for (const auto& [what, path] : files)
    cases->push_back(Make(app, "--data " + what, args + " --data " + path, 1, {"error: --data: ", path}));
  cases->push_back(Make(app, "--data unreadable", args + " --data @D/unreadable.csv", 1,
                        {"error: --data: ", "@D/unreadable.csv"}, true));
  cases->push_back(Make(app, "--data ''", args + " --data ''", 2, {"error: --data: "}));
}

// The cases of an output option `flag` on `app` + `args`; `ext` is the name
// ending the option asks for; `full`: also try /dev/full (the run itself is
// tiny, the write fails at the end).
void AddOutputCases(std::vector<Case>* cases, const std::string& app, const std::string& args,
                    const std::string& flag, const std::string& ext, bool full, bool has_data = true) {
  const std::string dir = ext == ".png" ? "@D/adir.png" : "@D/adir";
  cases->push_back(Make(app, flag + " directory", args + " " + flag + " " + dir, 1, {"error: " + flag + ": ", dir}));
  cases->push_back(Make(app, flag + " dir/", args + " " + flag + " @D/out/", ext.empty() ? 1 : 2,
                        {"error: " + flag + ": "}));
  cases->push_back(Make(app, flag + " missing directory", args + " " + flag + " @D/nope/x" + ext, 1,
                        {"error: " + flag + ": ", "@D/nope/x" + ext}));
  cases->push_back(Make(app, flag + " under a file", args + " " + flag + " @D/user/keep.json/x" + ext, 1,
                        {"error: " + flag + ": ", "@D/user/keep.json/x" + ext}));
  cases->push_back(Make(app, flag + " ''", args + " " + flag + " ''", 2, {"error: " + flag + ": "}));
  cases->push_back(Make(app, flag + " unwritable directory", args + " " + flag + " @D/ro/x" + ext, 1,
                        {"error: " + flag + ": ", "@D/ro/x" + ext}, true));
  if (has_data && ext.empty())
    cases->push_back(Make(app, flag + " = --data", args + " --data @DATA " + flag + " @DATA", 2,
                          {"error: " + flag + ": ", "--data"}));
  if (full && access("/dev/full", W_OK) == 0)
    cases->push_back(Make(app, flag + " /dev/full", args + " " + flag + " /dev/full", 1,
                          {"error: " + flag + ": ", "/dev/full"}));
}

// Options the programs share: unknown ones, stray arguments, values where
// none is taken, a 100 kB argument and binary bytes (quoted short).
void AddCommandLineCases(std::vector<Case>* cases, const std::string& app, const std::string& sub) {
  const std::string pre = sub.empty() ? "" : sub + " ";
  cases->push_back(Make(app, pre + "unknown option", pre + "--frobnicate 3", 2, {"unknown option --frobnicate"}));
  cases->push_back(Make(app, pre + "stray argument", pre + "--quiet extra", 2, {"'extra'"}));
  cases->push_back(Make(app, pre + "flag with a value", pre + "--quiet=1", 2, {"--quiet"}));
  cases->push_back(Make(app, pre + "100 kB argument", pre + "--quiet " + std::string(100000, 'z'), 2, {"zzz..."}));
  cases->push_back(Make(app, pre + "binary argument", pre + "--quiet $(printf 'a\\001\\002b')", 2, {"'a??b'"}));
}

const std::vector<Flag> kProblemFlags = {{"--alpha", 'r', {"0.5"}},
                                         {"--spectral-norm", 'r', {"0", "2e6"}},
                                         {"--et-step", 'r', {"0", "1.5"}},
                                         {"--rbm-scale", 'r', {"0", "2e6"}},
                                         {"--rbm-p", 'r', {"0", "1"}}};

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  // ---- implicit-compare
  const std::map<std::string, std::string> compare_base = {
      {"--problem", "deq-tanh"}, {"--solvers", "picard"}, {"--patterns", "2"}, {"--max-iter", "5"}};
  std::vector<Flag> compare_flags = {{"--tol", 'r', {"0", "-1"}},
                                     {"--max-iter", 'i', {"0", "1000001"}},
                                     {"--beta", 'r', {"0", "-1"}},
                                     {"--patterns", 'i', {"0", "1000001"}},
                                     {"--seed", 'i', {"-1", "4294967296"}}};
  compare_flags.insert(compare_flags.end(), kProblemFlags.begin(), kProblemFlags.end());
  AddFlagCases(&cases, kCompare, "", compare_base, compare_flags);
  const std::string compare_tiny = "--quiet" + Join(compare_base);
  for (const auto& [value, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--problem nope", "unknown problem 'nope'"}, {"--problem ''", "--problem: "},
           {"--problem a,,b", "--problem: "}, {"--solvers nope", "unknown solver 'nope'"},
           {"--solvers ''", "--solvers: "}, {"--solver-options anderson:memory=4294967296", "--solver-options: "},
           {"--solver-options anderson:memory=1e400", "--solver-options: "},
           {"--solver-options anderson:memory=abc", "--solver-options: "},
           {"--solver-options nonsense", "--solver-options: "}, {"--patterns 1798", "--patterns: 1798 exceeds"}}) {
    const std::string flag = value.substr(0, value.find(' '));
    cases.push_back(Make(kCompare, value,
                         "--quiet" + Join(compare_base, {flag, "--solvers"}) +
                             (flag == "--solvers" ? std::string() : " --solvers picard,anderson") + " " + value,
                         2, {expect}));
  }
  // Values that cannot give a finite computation, rejected before running.
  cases.push_back(Make(kCompare, "--beta 1e307 (scores overflow)",
                       "--quiet --problem hopfield-digits --solvers picard --patterns 3 --beta 1e307", 2,
                       {"--beta: beta * max|score|", "double"}));
  cases.push_back(Make(kCompare, "--beta 1e307 sparse-hopfield",
                       "--quiet --problem sparse-hopfield --solvers picard --patterns 3 --beta 1e307", 2,
                       {"--beta: beta * max|score|"}));
  cases.push_back(Make(kCompare, "--alpha 1e306 (entmax overflows)",
                       "--quiet --problem sparse-hopfield --solvers picard --patterns 3 --alpha 1e306", 2,
                       {"--alpha: (alpha - 1) * beta * max|score|"}));
  AddCommandLineCases(&cases, kCompare, "");
  AddDataCases(&cases, kCompare, compare_tiny);
  AddOutputCases(&cases, kCompare, compare_tiny, "--json", "", true);
  AddOutputCases(&cases, kCompare, compare_tiny, "--csv", "", true);
  AddOutputCases(&cases, kCompare, compare_tiny, "--plot", ".png", false);
  cases.push_back(Make(kCompare, "--csv = --json", compare_tiny + " --json @D/out/a.json --csv @D/out/a.json", 2,
                       {"error: --csv: ", "--json"}));
  cases.push_back(Make(kCompare, "--plot .gif", compare_tiny + " --plot @D/out/p.gif", 2, {"error: --plot: "}));

  // ---- implicit-bench
  const std::map<std::string, std::string> bench_base = {{"--problem", "deq-tanh"}, {"--solvers", "picard"},
                                                         {"--patterns", "2"},       {"--max-iter", "5"},
                                                         {"--repeat", "1"}};
  std::vector<Flag> bench_flags = {{"--patterns", 'i', {"0", "1000001"}},  {"--beta", 'r', {"0"}},
                                   {"--tol", 'r', {"0"}},                  {"--max-iter", 'i', {"0", "1000001"}},
                                   {"--time-limit", 'r', {"-1"}},          {"--repeat", 'i', {"0", "1001"}},
                                   {"--threads", 'i', {"-1", "1025"}},     {"--float-tol", 'r', {"0"}},
                                   {"--seed", 'i', {"-1", "4294967296"}},
                                   {"--autodiff-dims", 'I', {"15", "65537"}}};
  bench_flags.insert(bench_flags.end(), kProblemFlags.begin(), kProblemFlags.end());
  AddFlagCases(&cases, kBench, "", bench_base, bench_flags);
  const std::string bench_tiny = "--quiet" + Join(bench_base);
  cases.push_back(Make(kBench, "--float --beta 1e37 (float scores overflow)",
                       "--quiet --problem hopfield-digits --solvers picard --patterns 3 --repeat 1 --float --beta 1e37",
                       2, {"--beta: beta * max|score|", "float"}));
  cases.push_back(Make(kBench, "--beta 1e307", "--quiet --problem hopfield-digits --solvers picard --patterns 3 --beta 1e307",
                       2, {"--beta: "}));
  cases.push_back(Make(kBench, "--patterns 1798", "--quiet" + Join(bench_base, {"--patterns"}) + " --patterns 1798", 2,
                       {"--patterns: 1798 exceeds"}));
  cases.push_back(Make(kBench, "--problem nope", "--quiet --problem nope", 2, {"unknown problem 'nope'"}));
  cases.push_back(Make(kBench, "--graph-et-graphs cora", "--quiet --graph-et --graph-et-graphs gen_1000,cora", 2,
                       {"--graph-et-graphs: unknown graph 'cora'"}));
  cases.push_back(Make(kBench, "--solvers a,,b", "--quiet --solvers a,,b", 2, {"--solvers: "}));
  AddCommandLineCases(&cases, kBench, "");
  AddDataCases(&cases, kBench, bench_tiny);
  AddOutputCases(&cases, kBench, bench_tiny, "--json", "", true);

  // ---- implicit-hopfield
  const std::map<std::string, std::string> retrieval_base = {{"--patterns", "3"}, {"--max-iter", "5"}};
  AddFlagCases(&cases, kHopfield, "retrieval", retrieval_base,
               {{"--patterns", 'i', {"0", "1000001"}},
                {"--beta", 'r', {"0", "-1"}},
                {"--tol", 'r', {"0"}},
                {"--max-iter", 'i', {"0", "1000001"}}});
  AddFlagCases(&cases, kHopfield, "completion", {}, {{"--beta", 'r', {"0", "-1"}}});
  const std::map<std::string, std::string> capacity_base = {{"--dimension", "8"}, {"--counts", "4"}, {"--probes", "2"}};
  AddFlagCases(&cases, kHopfield, "capacity", capacity_base,
               {{"--dimension", 'i', {"1", "4097"}},
                {"--flip", 'r', {"-0.1", "0.5"}},
                {"--probes", 'i', {"0", "100001"}},
                {"--degree", 'i', {"1", "11"}},
                {"--seed", 'i', {"-1", "4294967296"}},
                {"--counts", 'I', {"0", "100001"}}});
  const std::map<std::string, std::string> sparse_base = {{"--patterns", "3"}, {"--betas", "1"}, {"--max-iter", "5"}};
  AddFlagCases(&cases, kHopfield, "sparse", sparse_base,
               {{"--patterns", 'i', {"0"}},
                {"--betas", 'R', {"1,0", "1,-1"}},
                {"--tol", 'r', {"0"}},
                {"--max-iter", 'i', {"0"}}});
  const std::string retrieval_tiny = "retrieval --quiet" + Join(retrieval_base);
  const std::string capacity_tiny = "capacity --quiet" + Join(capacity_base);
  cases.push_back(Make(kHopfield, "retrieval --beta 1e307", "retrieval --quiet --patterns 3 --beta 1e307", 2,
                       {"--beta: beta * max|score|"}));
  cases.push_back(Make(kHopfield, "completion --beta 1e307", "completion --quiet --beta 1e307", 2,
                       {"--beta: beta * max|score|"}));
  cases.push_back(Make(kHopfield, "sparse --betas 1,1e307", "sparse --quiet --patterns 3 --betas 1,1e307", 2,
                       {"--betas: beta * max|score|"}));
  cases.push_back(Make(kHopfield, "capacity 3 GB of patterns",
                       "capacity --quiet --dimension 4096 --counts 100000 --probes 2", 2, {"--counts: "}));
  cases.push_back(Make(kHopfield, "capacity 10 GB of probes",
                       "capacity --quiet --dimension 4096 --counts 4 --probes 100000", 2, {"--probes: "}));
  cases.push_back(Make(kHopfield, "retrieval --patterns 1798", "retrieval --quiet --patterns 1798", 2,
                       {"--patterns: 1798 exceeds"}));
  cases.push_back(Make(kHopfield, "retrieval --solver nope", retrieval_tiny + " --solver nope", 2,
                       {"--solver: ", "unknown solver 'nope'"}));
  cases.push_back(Make(kHopfield, "retrieval --solver ''", retrieval_tiny + " --solver ''", 2, {"--solver: "}));
  cases.push_back(Make(kHopfield, "no subcommand", "--quiet", 2, {"error: "}));
  cases.push_back(Make(kHopfield, "unknown subcommand", "retrival", 2, {"'retrival'"}));
  for (const std::string sub : {"retrieval", "capacity"}) AddCommandLineCases(&cases, kHopfield, sub);
  AddDataCases(&cases, kHopfield, retrieval_tiny);
  AddDataCases(&cases, kHopfield, "completion --quiet");
  AddDataCases(&cases, kHopfield, "sparse --quiet" + Join(sparse_base));
  AddOutputCases(&cases, kHopfield, capacity_tiny, "--json", "", true, false);
  AddOutputCases(&cases, kHopfield, retrieval_tiny, "--json", "", false);

  // ---- implicit-et
  const std::map<std::string, std::string> et_base = EtBase();
  AddFlagCases(&cases, kEt, "", et_base,
               {{"--steps", 'i', {"-1", "1000001"}},
                {"--batch", 'i', {"0", "4097"}},
                {"--lr", 'r', {"0", "-1"}},
                {"--energy-lr", 'r', {"0"}},
                {"--masked", 'i', {"0", "16"}},
                {"--unroll-steps", 'i', {"0", "10001"}},
                {"--dim", 'i', {"1", "513"}},
                {"--heads", 'i', {"-1", "65"}},
                {"--head-dim", 'i', {"0", "513"}},
                {"--memories", 'i', {"-1", "100001"}},
                {"--pos-dim", 'i', {"-1", "512"}},
                {"--step", 'r', {"0", "1.5"}},
                {"--tol", 'r', {"0"}},
                {"--max-iter", 'i', {"0", "1000001"}},
                {"--holdout", 'i', {"0", "1000001"}},
                {"--seed", 'i', {"-1", "4294967296"}},
                {"--checkpoint-every", 'i', {"-1", "1000000001"}},
                {"--check-gradients", 'i', {"-1", "10001"}},
                {"--threads", 'i', {"0", "65"}}});
  const std::string et_tiny = "--quiet" + Join(et_base);
  cases.push_back(Make(kEt, "--pos-dim = --dim", "--quiet" + Join(et_base, {"--pos-dim"}) + " --pos-dim 4", 2,
                       {"--pos-dim: "}));
  cases.push_back(Make(kEt, "--holdout 1797", "--quiet" + Join(et_base, {"--holdout"}) + " --holdout 1797", 2,
                       {"--holdout: "}));
  cases.push_back(Make(kEt, "--memories 100000 --dim 512 (memory)",
                       "--quiet --memories 100000 --dim 512 --threads 4 --steps 1", 2, {"--memories: ", "GB"}));
  cases.push_back(Make(kEt, "--heads 64 --head-dim 512 --dim 512 (memory)",
                       "--quiet --heads 64 --head-dim 512 --dim 512 --threads 64 --steps 1", 2, {"--heads: ", "GB"}));
  cases.push_back(Make(kEt, "--mode sideways", et_tiny + " --mode sideways", 2, {"--mode: "}));
  cases.push_back(Make(kEt, "--mode ''", et_tiny + " --mode ''", 2, {"--mode: "}));
  cases.push_back(Make(kEt, "--unroll --mode implicit", et_tiny + " --unroll --mode implicit", 2, {"--unroll"}));
  cases.push_back(Make(kEt, "--solver nope", et_tiny + " --solver nope", 2, {"--solver: "}));
  AddCommandLineCases(&cases, kEt, "");
  AddDataCases(&cases, kEt, et_tiny);
  AddOutputCases(&cases, kEt, et_tiny + " --data @DATA", "--json", "", true, false);
  AddOutputCases(&cases, kEt, "--quiet" + Join(et_base, {"--image"}) + " --data @DATA", "--image", ".png", false,
                 false);
  AddOutputCases(&cases, kEt, "--quiet" + Join(et_base, {"--checkpoint"}) + " --data @DATA", "--checkpoint", "", false,
                 false);
  cases.push_back(Make(kEt, "--checkpoint /dev/full (a device)",
                       "--quiet" + Join(et_base, {"--checkpoint"}) + " --checkpoint /dev/full", 1,
                       {"--checkpoint: ", "not a regular file"}));
  cases.push_back(Make(kEt, "--checkpoint = --data", "--quiet" + Join(et_base, {"--checkpoint"}) +
                                                          " --data @DATA --checkpoint @DATA",
                       2, {"--checkpoint: ", "--data"}));
  cases.push_back(Make(kEt, "--json = --resume", et_tiny + " --resume @D/user/good.ckpt --json @D/user/good.ckpt", 2,
                       {"--json: ", "--resume"}));
  cases.push_back(Make(kEt, "--json = --image", et_tiny + " --json @D/out/run.png", 2, {"--json: ", "--image"}));
  // --resume: every kind of bad checkpoint file.
  for (const auto& [what, path, expect] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"missing", "@D/missing.ckpt", "cannot open checkpoint"},
           {"empty", "@D/empty.csv", "truncated"},
           {"directory", "@D/adir", "is a directory"},
           {"fifo", "@D/fifo", "not a regular file"},
           {"truncated", "@D/cut.ckpt", "truncated"},
           {"bit flipped", "@D/flip.ckpt", "checksum mismatch"},
           {"binary", "@D/binary.bin", "not a libimplicit checkpoint"},
           {"1 MB line", "@D/hugeline.ckpt", "not a libimplicit checkpoint"},
           {"digits file", "@DATA", "not a libimplicit checkpoint"},
           {"other dimensions", "@D/otherdim.ckpt", "dim=6 there, dim=4 here"},
           {"other precision", "@D/float.ckpt", "different precision: float there, double here"},
           {"other data set", "@D/otherdata.ckpt", "different data"},
           {"another program", "@D/foreign.ckpt", "another program"},
           {"negative step", "@D/negstep.ckpt", "invalid step"},
           {"nan parameters", "@D/nan.ckpt", "not finite"}}) {
    cases.push_back(Make(kEt, "--resume " + what, et_tiny + " --data @DATA --resume " + path, 1,
                         {"error: --resume: ", path, expect}));
  }
  cases.push_back(Make(kEt, "--resume other --holdout", "--quiet" + Join(et_base, {"--holdout"}) +
                                                             " --holdout 21 --data @DATA --resume @D/user/good.ckpt",
                       1, {"error: --resume: ", "different data"}));
  cases.push_back(Make(kEt, "--resume ''", et_tiny + " --resume ''", 2, {"error: --resume: "}));
  cases.push_back(Make(kEt, "--resume unreadable", et_tiny + " --data @DATA --resume @D/unreadable.csv", 1,
                       {"error: --resume: ", "@D/unreadable.csv"}, true));

  // ---- implicit-graph
  const std::map<std::string, std::string> graph_base = {
      {"--nodes", "@D/user/g.nodes.csv"}, {"--edges", "@D/user/g.edges.csv"}, {"--models", "lr-raw"},
      {"--seeds", "1"}, {"--epochs", "2"}};
  AddFlagCases(&cases, kGraph, "", graph_base,
               {{"--train-ratio", 'r', {"0", "1", "-0.5"}}, {"--validation-ratio", 'r', {"0", "1"}},
                {"--seeds", 'i', {"0", "1001"}},           {"--seed", 'i', {"-1", "1000000001"}},
                {"--epochs", 'i', {"0", "1000001"}},       {"--et-epochs", 'i', {"0", "1000001"}},
                {"--lr", 'r', {"0", "-1"}},                {"--weight-decay", 'r', {"-1"}},
                {"--patience", 'i', {"0"}},                {"--et-dim", 'i', {"1", "4097"}},
                {"--et-heads", 'i', {"-1", "65"}},         {"--et-head-dim", 'i', {"0"}},
                {"--et-memories", 'i', {"-1", "100001"}},  {"--et-step", 'r', {"0", "-1"}},
                {"--tol", 'r', {"0"}},                     {"--max-iter", 'i', {"0", "1000001"}},
                {"--gcn-hidden", 'i', {"0", "4097"}},      {"--threads", 'i', {"0", "65"}},
                {"--et-init", 'r', {"-1", "101"}},       {"--et-hidden", 'i', {"-1", "4097"}},
                {"--et-hops", 'i', {"-1", "9"}}});
  const std::string graph_tiny = "--quiet" + Join(graph_base);
  AddOutputCases(&cases, kGraph, graph_tiny, "--checkpoint", "", false, false);
  cases.push_back(Make(kGraph, "--checkpoint = --json", graph_tiny + " --checkpoint @D/out/g.json --json @D/out/g.json",
                       2, {"--json: ", "--checkpoint"}));
  cases.push_back(Make(kGraph, "--checkpoint = --nodes", graph_tiny + " --checkpoint @D/user/g.nodes.csv", 2,
                       {"--checkpoint: ", "--nodes"}));
  for (const auto& [what, path, expect] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"missing", "@D/missing.ckpt", "cannot open checkpoint"},
           {"empty", "@D/empty.csv", "truncated"},
           {"directory", "@D/adir", "is a directory"},
           {"truncated", "@D/cut.ckpt", "truncated"},
           {"bit flipped", "@D/flip.ckpt", "checksum mismatch"},
           {"binary", "@D/binary.bin", "not a libimplicit checkpoint"},
           {"implicit-et's", "@D/user/good.ckpt", "not written by implicit-graph"}}) {
    cases.push_back(Make(kGraph, "--resume " + what, graph_tiny + " --resume " + path, 1,
                         {"error: --resume: ", path, expect}));
  }
  cases.push_back(Make(kGraph, "--graph nope", "--quiet --graph nope", 2, {"--graph"}));
  cases.push_back(Make(kGraph, "--nodes without --edges", "--quiet --nodes @D/user/g.nodes.csv", 2, {"--edges"}));
  cases.push_back(Make(kGraph, "--models svm", graph_tiny + " --models lr-raw,svm", 2, {"--models: "}));
  cases.push_back(Make(kGraph, "--train-ratio + --validation-ratio >= 1",
                       graph_tiny + " --train-ratio 0.6 --validation-ratio 0.4", 2, {"--validation-ratio: "}));
  cases.push_back(Make(kGraph, "--solver nope", graph_tiny + " --solver nope", 2, {"--solver: "}));
  // Bad --nodes / --edges files (the other one good): the error names the option and the file.
  const std::vector<std::pair<std::string, std::string>> graph_files = {
      {"missing", "@D/missing.csv.gz"}, {"directory", "@D/adir"},        {"fifo", "@D/fifo"},
      {"truncated", "@D/truncated.csv.gz"}, {"binary", "@D/binary.bin"}, {"1 MB line", "@D/hugeline.csv"},
      {"1 MB field", "@D/hugefield.csv"}, {"a checkpoint", "@D/user/good.ckpt"}};
  for (const char* option : {"--nodes", "--edges"}) {
    const std::string other = std::string(option) == "--nodes" ? "--edges" : "--nodes";
    const std::string rest = " --models lr-raw --seeds 1 --epochs 2 " + other + " @D/user/g." +
                             (other == "--nodes" ? "nodes" : "edges") + ".csv";
    for (const auto& [what, path] : graph_files)
      cases.push_back(Make(kGraph, std::string(option) + " " + what, "--quiet" + rest + " " + option + " " + path, 1,
                           {"error: " + std::string(option) + ": ", path}));
    cases.push_back(Make(kGraph, std::string(option) + " ''", "--quiet" + rest + " " + option + " ''", 2,
                         {"error: " + std::string(option) + ": "}));
    cases.push_back(Make(kGraph, std::string(option) + " unreadable", "--quiet" + rest + " " + option +
                             " @D/unreadable.csv", 1, {"error: " + std::string(option) + ": "}, true));
  }
  cases.push_back(Make(kGraph, "--nodes empty", "--quiet --models lr-raw --edges @D/user/g.edges.csv --nodes @D/empty.csv",
                       1, {"error: --nodes: ", "contains no nodes"}));
  cases.push_back(Make(kGraph, "--edges with three columns",
                       "--quiet --models lr-raw --nodes @D/user/g.nodes.csv --edges @D/wrongcols.csv", 1,
                       {"error: --edges: ", "@D/wrongcols.csv"}));
  AddCommandLineCases(&cases, kGraph, "");
  AddOutputCases(&cases, kGraph, graph_tiny, "--json", "", true, false);
  return cases;
}

// Runs `command` through /bin/sh with stdout and stderr captured in
// `prefix`.out and `prefix`.err: RunCommand without its own temporary
// directory, and callable from several threads (fork + exec, waitpid on the
// child only).
CommandResult RunCase(const std::string& command, const std::string& prefix) {
  const std::string out = prefix + ".out", err = prefix + ".err";
  const std::string line = command + " > " + ShellQuote(out) + " 2> " + ShellQuote(err);
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  CommandResult r;
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    if (r.exit_code > 128 && r.exit_code < 160) r.signal = r.exit_code - 128;
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

const std::vector<Case>& Cases();

// The command line of a case: run in @D/out (what a run writes by default
// lands there). In the sanitizer build LeakSanitizer's exit-time scan would
// double the suite's time (it costs more than the run, which stops at
// validation): it stays on for every 8th case and the fault tests, and is
// off for the others (ASan and UBSan stay on for all).
// Root runs the cases that file permissions must stop as nobody (setpriv).
bool RunsAsNobody(const Case& c) { return c.needs_non_root && Root(); }

std::string CommandOf(const Case& c) {
  const std::string leaks = c.index % 8 == 0 ? "" : "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" ";
  // As nobody: what earlier cases left in out/ (root's files) is made writable first.
  const bool as_nobody = RunsAsNobody(c);
  const std::string user = as_nobody ? std::string("/usr/bin/") + kUnprivileged : "";
  const std::string open_up = as_nobody ? "(chmod -Rf a+rwX . || true) && " : "";
  return "cd " + ShellQuote(Env().dir + "/out") + " && " + open_up + leaks + "exec " + user +
         Env().Expand(c.command);
}

// The result of case `index`. The cases run two at a time (CI has 2 cores):
// asking for case i starts case i + 1 too, each with its own output files;
// but a case run as nobody runs alone, since the files a case beside it writes
// in out/ as root (its default checkpoint, say) would not be writable for it.
// Whether a user file changed is checked against the hashes taken before the
// first case (no case may change one).
CommandResult ResultOf(std::size_t index) {
  static std::map<std::size_t, std::future<CommandResult>> running;
  auto as_nobody = [](std::size_t i) { return i < Cases().size() && RunsAsNobody(Cases()[i]); };
  auto start = [&](std::size_t i) {
    if (i >= Cases().size() || running.count(i) > 0 || SkippedAsRoot(Cases()[i].needs_non_root)) return;
    const std::string command = CommandOf(Cases()[i]), prefix = Env().dir + "/case" + std::to_string(i % 2);
    running[i] = std::async(std::launch::async, [command, prefix] { return RunCase(command, prefix); });
  };
  start(index);
  if (!as_nobody(index) && !as_nobody(index + 1)) start(index + 1);
  CommandResult r = running.at(index).get();
  running.erase(index);
  return r;
}

void Check(const Case& c) {
  if (SkippedAsRoot(c.needs_non_root)) {
    BOOST_TEST_MESSAGE("skipped (running as root, whom file permissions do not stop, and "
                       << WhyNotUnprivileged() << "): " << c);
    BOOST_TEST(true);
    return;
  }
  const Scratch& env = Env();
  static const std::map<std::string, std::string> before = env.UserFiles();
  const std::string command = CommandOf(c);
  const CommandResult r = ResultOf(c.index);
  BOOST_TEST_CONTEXT("command: " << command.substr(0, 600) << "\nstdout: " << r.out.substr(0, 600)
                                  << "\nstderr: " << r.err.substr(0, 600)) {
    BOOST_TEST(r.signal == 0);
    BOOST_TEST(r.exit_code == c.status);
    BOOST_TEST(CountLines(r.err) == 1);
    BOOST_TEST(r.err.size() <= 800u);  // quoted input is cut to an excerpt
    BOOST_TEST(r.err.rfind(c.program + ": error: ", 0) == 0u);
    for (const std::string& e : c.expect) {
      const std::string text = env.Expand(e);
      BOOST_TEST(r.err.find(text) != std::string::npos, "expected '" << text << "'");
    }
    BOOST_TEST(env.UserFiles() == before, "a user file changed");
  }
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> all = AllCases();
    for (std::size_t i = 0; i < all.size(); ++i) all[i].index = i;
    return all;
  }();
  return cases;
}

}  // namespace

// At least 300 bad inputs, every one ending with exit 2 or 1 and one line.
BOOST_AUTO_TEST_CASE(the_table_has_enough_cases) {
  BOOST_TEST_MESSAGE(Cases().size() << " bad-input cases");
  BOOST_TEST(Cases().size() >= 300u);
}

BOOST_DATA_TEST_CASE(bad_input, boost::unit_test::data::make(Cases()), c) { Check(c); }

namespace {

// The temporary checkpoint files next to `path`'s name in `dir`.
std::vector<std::string> Temporaries(const std::string& dir, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& f : Env().FilesIn(dir))
    if (f.rfind(name + ".tmp.", 0) == 0) out.push_back(f);
  return out;
}

// The small et model with `args`, which give --checkpoint and --steps.
std::string EtCommand(const std::string& args) {
  return Env().Expand(kEt + " --quiet" + Join(EtBase(), {"--checkpoint", "--steps"}) + " --data @DATA " + args);
}
// The same, run in @D/<dir>.
std::string EtRun(const std::string& dir, const std::string& args) {
  return "cd " + ShellQuote(Env().dir + "/" + dir) + " && " + EtCommand(args);
}

// The pid of a process that has exited (and been reaped).
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

// A training run SIGKILLed while it writes a checkpoint (caught by stopping
// it whenever a temporary file exists): the checkpoint under the real name is
// the previous, complete one; the restart removes the temporary file and
// resumes from it.
BOOST_AUTO_TEST_CASE(killed_while_writing_a_checkpoint) {
  const std::string sub = "kill";
  const std::string dir = Env().dir + "/" + sub;
  ::mkdir(dir.c_str(), 0755);
  const std::string ckpt = dir + "/run.ckpt";
  const pid_t pid = implicit::testing::StartCommand(
      EtCommand("--checkpoint " + ckpt + " --steps 100000 --checkpoint-every 1"), dir + "/log");
  bool caught = false, exited = false;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    ::kill(pid, SIGSTOP);
    int stopped = 0;
    waitpid(pid, &stopped, WUNTRACED);  // until it has stopped
    if (!WIFSTOPPED(stopped)) {
      exited = true;
      break;
    }
    if (!Temporaries(sub, "run.ckpt").empty() && FileHash(ckpt) != "missing") {
      caught = true;
      break;
    }
    ::kill(pid, SIGCONT);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  BOOST_REQUIRE_MESSAGE(!exited, "implicit-et ended early: " << ReadFile(dir + "/log"));
  ::kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  BOOST_TEST(WIFSIGNALED(status));
  BOOST_TEST_MESSAGE("killed while writing a checkpoint: " << (caught ? "caught mid-write" : "not caught"));
  if (!caught) {
    // Never stopped inside a write (a very fast disk): leave what a killed
    // writer leaves, a partial temporary file of a process that is gone.
    BOOST_TEST_MESSAGE("the writer was not caught mid-write; using a temporary file of a dead process");
    BOOST_REQUIRE(FileHash(ckpt) != "missing");
    WriteBytes(ckpt + ".tmp." + std::to_string(DeadPid()) + ".a1b2c3", "IMPLCKPT partial");
  }
  const std::vector<std::string> left = Temporaries(sub, "run.ckpt");
  BOOST_TEST(!left.empty());
  // The checkpoint under the real name is complete.
  const implicit::Checkpoint before = implicit::LoadCheckpoint(ckpt);
  BOOST_TEST(before.step >= 1);
  const std::string hash = FileHash(ckpt);
  // A restart resumes from it and removes the stale temporary files.
  const CommandResult r = RunCommand(
      EtRun(sub, "--checkpoint " + ckpt + " --resume " + ckpt + " --steps " + std::to_string(before.step + 1)));
  BOOST_TEST_INFO("stdout: " << r.out << "\nstderr: " << r.err);
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.out.find("trained 1 steps") != std::string::npos);
  BOOST_TEST(Temporaries(sub, "run.ckpt").empty());
  BOOST_TEST(implicit::LoadCheckpoint(ckpt).step == before.step + 1);
  BOOST_TEST(FileHash(ckpt) != hash);
}

// A run whose loss turns nan (a learning rate far too large) fails, says
// which checkpoint it kept and writes none of its outputs; the checkpoint is
// byte for byte the last good one, and resuming from it trains normally.
BOOST_AUTO_TEST_CASE(diverged_run_keeps_the_last_good_checkpoint) {
  const std::string sub = "diverge";
  const std::string dir = Env().dir + "/" + sub;
  ::mkdir(dir.c_str(), 0755);
  const std::string ckpt = dir + "/run.ckpt";
  BOOST_REQUIRE(RunCommand(EtRun(sub, "--checkpoint " + ckpt + " --steps 2")).exit_code == 0);
  const std::string good = FileHash(ckpt);
  // The divergence rule (docs/programs.md): one line, the run evaluated with
  // the last finite parameters, the JSON marks the step, exit status 3, the
  // last good checkpoint kept.
  for (const std::string& more : {std::string(""), std::string(" --checkpoint-every 1")}) {
    const CommandResult r = RunCommand(EtRun(sub, "--checkpoint " + ckpt + " --resume " + ckpt +
                                                      " --steps 8 --lr 1e300 --json " + dir + "/d.json" + more));
    BOOST_TEST_CONTEXT("stderr: " << r.err) {
      BOOST_TEST(r.exit_code == 3);
      BOOST_TEST(CountLines(r.err) == 1);
      BOOST_TEST(r.err.find("implicit-et: training diverged at step") == 0u);
      BOOST_TEST(r.err.find("lower --lr") != std::string::npos);
      BOOST_TEST(r.err.find("'" + ckpt + "' (step 2)") != std::string::npos);
      BOOST_TEST(r.err.find("kept") != std::string::npos);
      BOOST_TEST(FileHash(ckpt) == good);
      const Json j = implicit::testing::ReadJson(dir + "/d.json");
      BOOST_TEST(j.at("diverged_at_step").get<long>() >= 3);
      BOOST_TEST(j.at("divergence").get<std::string>().find("loss") == 0u);
      BOOST_TEST(std::isfinite(j.at("heldout_mse").get<double>()));
      BOOST_TEST(Temporaries(sub, "run.ckpt").empty());
    }
  }
  // Diverging after this run's own checkpoints: the last one is kept.
  const std::string fresh = dir + "/fresh.ckpt";
  const CommandResult d = RunCommand(EtRun(sub, "--checkpoint " + fresh + " --steps 8 --lr 1e300 --checkpoint-every 1"));
  BOOST_TEST(d.exit_code == 3);
  BOOST_TEST(d.err.find("diverged") != std::string::npos);
  if (FileHash(fresh) != "missing") {
    const implicit::Checkpoint kept = implicit::LoadCheckpoint(fresh);
    bool finite = true;
    for (const auto& [name, tensors] : kept.parameter_sets())
      for (const auto& t : tensors) finite = finite && t.values.allFinite();
    BOOST_TEST(finite);
    BOOST_TEST(d.err.find("(step " + std::to_string(kept.step) + ") is kept") != std::string::npos);
  }
  // Resuming from the kept checkpoint with a sane learning rate works.
  const CommandResult r = RunCommand(EtRun(sub, "--checkpoint " + ckpt + " --resume " + ckpt + " --steps 3 --json " +
                                                    dir + "/r.json"));
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.out.find("trained 1 steps") != std::string::npos);
  BOOST_TEST(implicit::testing::ReadJson(dir + "/r.json").at("heldout_mse").is_number());
  BOOST_TEST(implicit::LoadCheckpoint(ckpt).step == 3);
}

// A checkpoint at or past --steps (the total): nothing to train, never
// negative steps; the checkpoint is not rewritten; the evaluation still runs.
BOOST_AUTO_TEST_CASE(checkpoint_at_or_past_steps_is_nothing_to_do) {
  const std::string ckpt = Env().dir + "/user/good.ckpt";  // step 2
  const std::string hash = FileHash(ckpt);
  for (const std::string steps : {"2", "1", "0"}) {
    const CommandResult r = RunCommand(EtRun("out", "--checkpoint " + ckpt + " --resume " + ckpt + " --steps " +
                                                        steps + " --json " + Env().dir + "/out/n.json"));
    BOOST_TEST_CONTEXT("--steps " << steps << "\nstdout: " << r.out << "\nstderr: " << r.err) {
      BOOST_TEST(r.exit_code == 0);
      BOOST_TEST(r.out.find("nothing to do") != std::string::npos);
      BOOST_TEST(r.out.find("trained -") == std::string::npos);
      BOOST_TEST(FileHash(ckpt) == hash);
      BOOST_TEST(implicit::testing::ReadJson(Env().dir + "/out/n.json").at("heldout_mse").is_number());
    }
  }
}

// Temporary files of dead writers are removed when a run starts; a live
// writer's file, a directory and other files are left alone.
BOOST_AUTO_TEST_CASE(stale_temporary_files_are_removed_on_start) {
  const std::string sub = "stale";
  const std::string dir = Env().dir + "/" + sub;
  ::mkdir(dir.c_str(), 0755);
  const std::string dead = "run.ckpt.tmp." + std::to_string(DeadPid()) + ".x1y2z3";
  const std::string live = "run.ckpt.tmp.1.abcdef";  // pid 1 always runs
  for (const std::string& f : {dead, std::string("run.ckpt.tmp.Qw3rTy"), live, std::string("run.ckpt.txt")})
    WriteBytes(dir + "/" + f, "partial");
  ::mkdir((dir + "/run.ckpt.tmp.999999.dirdir").c_str(), 0755);
  const CommandResult r = RunCommand(EtRun(sub, "--checkpoint " + dir + "/run.ckpt --steps 1"));
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 0);
  const std::vector<std::string> files = Env().FilesIn(sub);
  auto has = [&](const std::string& f) { return std::find(files.begin(), files.end(), f) != files.end(); };
  BOOST_TEST(!has(dead));
  BOOST_TEST(!has("run.ckpt.tmp.Qw3rTy"));
  BOOST_TEST(has(live));
  BOOST_TEST(has("run.ckpt.txt"));
  BOOST_TEST(has("run.ckpt.tmp.999999.dirdir"));
  BOOST_TEST(has("run.ckpt"));
}

// A solve that did not converge is never reported as converged, and a run
// that exits 0 has written every output it was asked for.
BOOST_AUTO_TEST_CASE(statuses_are_honest_and_outputs_written) {
  const std::string out = Env().dir + "/out/";
  const CommandResult r =
      RunCommand(kCompare + " --quiet --problem deq-tanh,hopfield-digits --solvers picard,anderson --patterns 4 "
                            "--max-iter 1 --json " + out + "h.json --csv " + out + "h.csv");
  BOOST_REQUIRE(r.exit_code == 0);
  BOOST_TEST(FileHash(out + "h.csv") != "missing");
  const Json results = implicit::testing::ReadJson(out + "h.json");
  for (const Json& row : results.at("results")) {
    BOOST_TEST_INFO(row.dump());
    BOOST_TEST((row.at("status").get<std::string>() == "converged") ==
               (row.at("converged_samples").get<double>() == row.at("samples").get<double>()));
  }
  const CommandResult h = RunCommand(kHopfield + " retrieval --quiet --patterns 20 --max-iter 1 --json " + out +
                                     "r.json");
  BOOST_REQUIRE(h.exit_code == 0);
  const Json j = implicit::testing::ReadJson(out + "r.json");
  BOOST_TEST((j.at("status").get<std::string>() == "converged") ==
             (j.at("converged_samples").get<double>() == j.at("samples").get<double>()));
  // Just inside the finite range of beta: a real answer, finite hit rates.
  const CommandResult b = RunCommand(kHopfield + " retrieval --quiet --patterns 3 --beta 8e305 --json " + out +
                                     "b.json");
  BOOST_TEST_INFO("stderr: " << b.err);
  BOOST_REQUIRE(b.exit_code == 0);
  BOOST_TEST(implicit::testing::ReadJson(out + "b.json").at("converged_hit_rate").is_number());
}
