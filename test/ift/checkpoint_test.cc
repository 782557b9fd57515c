// Checkpoints: exact round trip of parameters, optimiser state and metadata;
// atomic writes; truncated, corrupt, foreign, mismatched and non-regular
// files rejected with a message that says what is wrong; temporary files of
// killed writers cleaned up.
#define BOOST_TEST_MODULE checkpoint
#include <boost/test/unit_test.hpp>

#include <implicit/core/checkpoint.h>
#include <implicit/core/optimizers.h>

#include "support/test_problems.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

using implicit::Checkpoint;
using implicit::ParameterSet;
using implicit::Vector;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/implicit_ckpt_XXXXXX";
    BOOST_REQUIRE(mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() {
    for (const std::string& f : Files()) std::remove((path + "/" + f).c_str());
    rmdir(path.c_str());
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    DIR* d = opendir(path.c_str());
    if (d == nullptr) return out;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
    return out;
  }
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename Scalar>
ParameterSet<Scalar> Model(int hidden, unsigned seed) {
  ParameterSet<Scalar> p;
  p.Add("W", hidden, hidden);
  p.Add("U", hidden, 3);
  p.Add("b", hidden, 1);
  p.values() = implicit::testing::RandomMatrix<Scalar>(p.size(), 1, seed);
  return p;
}

// The message of the std::runtime_error that f throws ("" if none).
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool Contains(const std::string& s, const std::string& part) {
  if (s.find(part) == std::string::npos) {
    BOOST_TEST_MESSAGE("'" << s << "' does not contain '" << part << "'");
    return false;
  }
  return true;
}

// A checkpoint of a model trained for a few Adam steps.
struct Trained {
  ParameterSet<double> model = Model<double>(4, 1);
  ParameterSet<float> head = Model<float>(2, 2);
  implicit::AdamOptimizer<double> adam;
  Checkpoint ckpt;
  Trained() {
    for (int k = 0; k < 3; ++k) {
      adam.Step(model, implicit::testing::RandomMatrix<double>(model.size(), 1, 10 + k));
    }
    model.values()(0) = std::numeric_limits<double>::denorm_min();  // exactness at the edges
    model.values()(1) = -1.0 / 3.0;
    ckpt.step = 1234567890123LL;
    ckpt.metadata["model"] = "tanh-deq";
    ckpt.metadata["note"] = std::string("binary\0ok", 9);
    ckpt.AddParameters("model", model);
    ckpt.AddParameters("head", head);
    ckpt.AddOptimizer("adam", adam.state());
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_is_exact) {
  TempDir dir;
  Trained t;
  const std::string path = dir.path + "/run.ckpt";
  implicit::SaveCheckpoint(path, t.ckpt);
  const Checkpoint loaded = implicit::LoadCheckpoint(path);
  BOOST_TEST(loaded.step == t.ckpt.step);
  BOOST_TEST(loaded.metadata == t.ckpt.metadata);

  ParameterSet<double> model = Model<double>(4, 99);
  ParameterSet<float> head = Model<float>(2, 98);
  loaded.RestoreParameters("model", &model);
  loaded.RestoreParameters("head", &head);
  BOOST_TEST(model.values() == t.model.values());  // bit-identical
  BOOST_TEST(head.values() == t.head.values());

  implicit::AdamOptimizer<double> adam;
  adam.SetState(loaded.Optimizer("adam"), model.size());
  BOOST_TEST(adam.step_count() == 3);
  BOOST_TEST(adam.first_moment() == t.adam.first_moment());
  BOOST_TEST(adam.second_moment() == t.adam.second_moment());

  // Resuming continues exactly as the original run would have.
  Vector<double> g = implicit::testing::RandomMatrix<double>(model.size(), 1, 50);
  adam.Step(model, g);
  t.adam.Step(t.model, g);
  BOOST_TEST(model.values() == t.model.values());

  // No temporary file is left behind; saving again replaces the file.
  BOOST_TEST(dir.Files().size() == 1u);
  t.ckpt.step = 7;
  implicit::SaveCheckpoint(path, t.ckpt);
  BOOST_TEST(implicit::LoadCheckpoint(path).step == 7);
  BOOST_TEST(dir.Files().size() == 1u);
}

BOOST_AUTO_TEST_CASE(truncated_files_are_rejected) {
  TempDir dir;
  Trained t;
  const std::string good = dir.path + "/good.ckpt", bad = dir.path + "/bad.ckpt";
  implicit::SaveCheckpoint(good, t.ckpt);
  const std::string bytes = ReadAll(good);
  for (std::size_t keep : {std::size_t(0), std::size_t(4), std::size_t(8), std::size_t(20),
                           std::size_t(24), bytes.size() / 2, bytes.size() - 9, bytes.size() - 1}) {
    WriteAll(bad, bytes.substr(0, keep));
    const std::string m = ErrorOf([&] { implicit::LoadCheckpoint(bad); });
    BOOST_TEST_INFO("kept " << keep << " of " << bytes.size() << " bytes: " << m);
    BOOST_TEST(Contains(m, "truncated"));
    BOOST_TEST(Contains(m, bad));
  }
}

BOOST_AUTO_TEST_CASE(corrupt_and_foreign_files_are_rejected) {
  TempDir dir;
  Trained t;
  const std::string good = dir.path + "/good.ckpt", bad = dir.path + "/bad.ckpt";
  implicit::SaveCheckpoint(good, t.ckpt);
  const std::string bytes = ReadAll(good);

  // Every single flipped byte of the payload or checksum is detected.
  for (std::size_t i = 24; i < bytes.size(); i += 7) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ 0x10);
    WriteAll(bad, b);
    const std::string m = ErrorOf([&] { implicit::LoadCheckpoint(bad); });
    BOOST_TEST_INFO("byte " << i << ": " << m);
    BOOST_TEST(Contains(m, "checksum mismatch"));
  }
  std::string b = bytes;
  b[0] = 'X';
  WriteAll(bad, b);
  BOOST_TEST(Contains(ErrorOf([&] { implicit::LoadCheckpoint(bad); }), "not a libimplicit checkpoint"));
  WriteAll(bad, "0,0,5,13,9,1,0,0\n");
  BOOST_TEST(Contains(ErrorOf([&] { implicit::LoadCheckpoint(bad); }), "not a libimplicit checkpoint"));
  b = bytes;
  b[8] = 2;  // version 2
  WriteAll(bad, b);
  const std::string v = ErrorOf([&] { implicit::LoadCheckpoint(bad); });
  BOOST_TEST(Contains(v, "unsupported checkpoint format version 2"));
  b = bytes + "extra";
  WriteAll(bad, b);
  BOOST_TEST(Contains(ErrorOf([&] { implicit::LoadCheckpoint(bad); }), "corrupt"));
  BOOST_TEST(Contains(ErrorOf([&] { implicit::LoadCheckpoint(dir.path + "/missing.ckpt"); }),
                      "cannot open checkpoint"));
}

BOOST_AUTO_TEST_CASE(checkpoints_of_a_different_model_are_rejected) {
  Trained t;
  const Checkpoint c = Checkpoint::Deserialize(t.ckpt.Serialize());
  {  // Different shape: names the parameter and both shapes; params untouched.
    ParameterSet<double> other = Model<double>(5, 3);
    const Vector<double> before = other.values();
    const std::string m = ErrorOf([&] { c.RestoreParameters("model", &other); });
    BOOST_TEST(Contains(m, "model/W"));
    BOOST_TEST(Contains(m, "4x4"));
    BOOST_TEST(Contains(m, "5x5"));
    BOOST_TEST(other.values() == before);
  }
  {  // A parameter the checkpoint lacks.
    ParameterSet<double> other = Model<double>(4, 3);
    other.Add("extra", 2, 2);
    const std::string m = ErrorOf([&] { c.RestoreParameters("model", &other); });
    BOOST_TEST(Contains(m, "'extra'"));
    BOOST_TEST(Contains(m, "different model"));
  }
  {  // A parameter the model lacks.
    ParameterSet<double> other;
    other.Add("W", 4, 4);
    other.Add("b", 4, 1);
    const std::string m = ErrorOf([&] { c.RestoreParameters("model", &other); });
    BOOST_TEST(Contains(m, "model/U"));
    BOOST_TEST(Contains(m, "4x3"));
  }
  ParameterSet<double> p = Model<double>(4, 3);
  BOOST_TEST(Contains(ErrorOf([&] { c.RestoreParameters("encoder", &p); }), "no parameter set 'encoder'"));
  BOOST_TEST(Contains(ErrorOf([&] { c.Optimizer("sgd"); }), "no optimiser state 'sgd'"));
  implicit::AdamOptimizer<double> adam;
  BOOST_CHECK_THROW(adam.SetState(c.Optimizer("adam"), p.size() + 3), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(failed_save_leaves_the_destination_alone) {
  TempDir dir;
  Trained t;
  const std::string m =
      ErrorOf([&] { implicit::SaveCheckpoint(dir.path + "/no/such/dir/x.ckpt", t.ckpt); });
  BOOST_TEST(Contains(m, "no/such/dir/x.ckpt"));
  BOOST_TEST(dir.Files().empty());
}

// A directory, a FIFO or another non-regular file is no checkpoint: the error
// names the path (not the stream library's internals) and never blocks.
BOOST_AUTO_TEST_CASE(non_regular_files_are_rejected_by_name) {
  TempDir dir;
  const std::string sub = dir.path + "/a.ckpt";
  BOOST_REQUIRE(mkdir(sub.c_str(), 0755) == 0);
  const std::string m = ErrorOf([&] { implicit::LoadCheckpoint(sub); });
  BOOST_TEST(Contains(m, "'" + sub + "'"));
  BOOST_TEST(Contains(m, "directory"));
  rmdir(sub.c_str());
  const std::string fifo = dir.path + "/f.ckpt";
  BOOST_REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  const std::string f = ErrorOf([&] { implicit::LoadCheckpoint(fifo); });
  BOOST_TEST(Contains(f, "'" + fifo + "'"));
  BOOST_TEST(Contains(f, "not a regular file"));
}

// The temporary files of writers that were killed (their pid no longer runs,
// or the older names without a pid) are removed; a running writer's file, the
// checkpoint itself, other files and directories are left alone.
BOOST_AUTO_TEST_CASE(stale_temporary_files_of_killed_writers_are_removed) {
  TempDir dir;
  Trained t;
  const std::string path = dir.path + "/run.ckpt";
  implicit::SaveCheckpoint(path, t.ckpt);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  BOOST_REQUIRE(child > 0);
  waitpid(child, nullptr, 0);  // a pid that no longer runs
  const std::string dead = "run.ckpt.tmp." + std::to_string(child) + ".Ab12Cd";
  const std::string old = "run.ckpt.tmp.Zz9Yy8";
  const std::string live = "run.ckpt.tmp.1.Ab12Cd";  // pid 1 runs
  const std::string other = "other.ckpt.tmp." + std::to_string(child) + ".Ab12Cd";
  for (const std::string& f : {dead, old, live, other}) WriteAll(dir.path + "/" + f, "partial");
  const std::vector<std::string> removed = implicit::RemoveStaleCheckpointTemporaries(path);
  BOOST_TEST(removed.size() == 2u);
  std::vector<std::string> files = dir.Files();
  std::sort(files.begin(), files.end());
  std::vector<std::string> expected = {live, other, "run.ckpt"};
  std::sort(expected.begin(), expected.end());
  BOOST_TEST(files == expected, boost::test_tools::per_element());
  BOOST_TEST(implicit::LoadCheckpoint(path).step == t.ckpt.step);
  // A save names its temporary file after this process, and removes it.
  implicit::SaveCheckpoint(path, t.ckpt);
  BOOST_TEST(dir.Files().size() == 3u);
  BOOST_TEST(implicit::RemoveStaleCheckpointTemporaries(dir.path + "/missing/x.ckpt").empty());
  for (const std::string& f : {live, other}) std::remove((dir.path + "/" + f).c_str());
}
