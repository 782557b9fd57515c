// ADOL-C tapes for reverse-mode derivatives (reverse_tape.h).
#if IMPLICIT_HAVE_ADOLC

#include <implicit/core/reverse_tape.h>

#include <adolc/drivers/drivers.h>
#include <adolc/interfaces.h>
#include <adolc/internal/usrparms.h>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

// ADOL-C's prefixes of its tape file names (operations, locations, values,
// Taylors), "./ADOLC-Operations_" etc. by default: set when libadolc loads,
// freed by it at exit. Not in its public headers, but exported.
extern char* tapeBaseNames[4];

namespace implicit {
namespace internal {
namespace {

std::recursive_mutex& AdolcMutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

// ADOL-C names tapes by a short; the tags in use by live ReverseTapes.
std::set<short>& TagsInUse() {
  static std::set<short> tags;
  return tags;
}

// A tape that outgrows its buffers is written to files (its first recording
// does, before its size is known). ADOL-C would write them into the current
// directory; they go into a private directory instead, made once per process
// (under TMPDIR or /tmp) and removed at exit. If it cannot be made, ADOL-C's
// defaults stay.
std::string& TapeDirectory() {
  static std::string directory;
  return directory;
}

void RemoveTapeDirectory() {
  const std::string& dir = TapeDirectory();
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) {
        std::remove((dir + "/" + entry->d_name).c_str());
      }
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

void UsePrivateTapeDirectory() {
  static bool done = false;
  if (done) return;
  done = true;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                        "/libimplicit-adolc-XXXXXX";
  if (mkdtemp(&pattern[0]) == nullptr) return;
  TapeDirectory() = pattern;
  for (char*& base : tapeBaseNames) {
    if (base == nullptr) continue;
    const char* slash = std::strrchr(base, '/');
    const std::string name = pattern + "/" + (slash != nullptr ? slash + 1 : base);
    char* copy = static_cast<char*>(std::malloc(name.size() + 1));
    if (copy == nullptr) continue;
    std::memcpy(copy, name.c_str(), name.size() + 1);
    std::free(base);
    base = copy;
  }
  std::atexit(RemoveTapeDirectory);
}

short AcquireTag() {
  std::lock_guard<std::recursive_mutex> lock(AdolcMutex());
  UsePrivateTapeDirectory();
  // ReverseTape re-records at a branch switch itself: ADOL-C's own warning
  // on stderr ("Retaping recommended!") would only be noise.
  disableBranchSwitchWarnings();
  std::set<short>& used = TagsInUse();
  for (short tag = 1; tag < std::numeric_limits<short>::max(); ++tag) {
    if (used.insert(tag).second) return tag;
  }
  throw std::runtime_error("ReverseTape: more than 32766 tapes alive at once");
}

}  // namespace

ReverseTape::ReverseTape(Index size)
    : tag_(AcquireTag()), size_(size), buffers_{OBUFSIZE, LBUFSIZE, VBUFSIZE, TBUFSIZE} {
  if (size <= 0 || size > std::numeric_limits<int>::max()) {
    std::lock_guard<std::recursive_mutex> lock(AdolcMutex());
    TagsInUse().erase(tag_);
    throw std::invalid_argument("ReverseTape: the number of independent variables must be in "
                                "[1, 2^31), got " + std::to_string(size));
  }
}

ReverseTape::~ReverseTape() {
  std::lock_guard<std::recursive_mutex> lock(AdolcMutex());
  if (recorded_) removeTape(tag_, ADOLC_REMOVE_COMPLETELY);
  TagsInUse().erase(tag_);
}

ReverseTape& ReverseTape::operator=(const ReverseTape& other) {
  if (this != &other) {
    std::lock_guard<std::recursive_mutex> lock(AdolcMutex());
    if (recorded_) removeTape(tag_, ADOLC_REMOVE_COMPLETELY);
    recorded_ = false;
    size_ = other.size_;
  }
  return *this;
}

std::unique_lock<std::recursive_mutex> ReverseTape::Lock() {
  return std::unique_lock<std::recursive_mutex>(AdolcMutex());
}

void ReverseTape::BeginRecording() {
  recorded_ = false;
  trace_on(tag_, /*keepTaylors=*/0, static_cast<uint>(buffers_[0]),
           static_cast<uint>(buffers_[1]), static_cast<uint>(buffers_[2]),
           static_cast<uint>(buffers_[3]));
}

bool ReverseTape::EndRecording(adouble& value) {
  double ignored = 0;
  value >>= ignored;
  trace_off();
  std::size_t stats[STAT_SIZE];
  tapestats(tag_, stats);
  // Taylor buffer: a Hessian-vector product's forward sweep keeps two
  // Taylor coefficients per value.
  const std::size_t needed[4] = {stats[NUM_OPERATIONS], stats[NUM_LOCATIONS],
                                 stats[NUM_VALUES], 2 * stats[TAY_STACK_SIZE]};
  bool fits = true;
  for (int i = 0; i < 4; ++i) {
    if (needed[i] + 1 > buffers_[i]) {
      if (needed[i] + 1 > std::numeric_limits<uint>::max()) {
        throw std::runtime_error("ReverseTape: the recorded function is too large for a tape (" +
                                 std::to_string(needed[i]) + " entries)");
      }
      buffers_[i] = needed[i] + 1;
      fits = false;
    }
  }
  if (fits && !TapeDirectory().empty()) {
    // The tape is in memory now: drop the files an earlier, too large
    // recording of this tag left in the private directory.
    for (const char* base : tapeBaseNames) {
      if (base != nullptr) std::remove((base + std::to_string(tag_) + ".tap").c_str());
    }
  }
  return fits;
}

bool ReverseTape::GradientAndValue(const double* z, double* value, double* grad) const {
  const int n = static_cast<int>(size_);
  double y = 0;
  if (zos_forward(tag_, 1, n, /*keep=*/1, z, &y) < 0) return false;
  double weight = 1;
  fos_reverse(tag_, 1, n, &weight, grad);
  *value = y;
  return true;
}

bool ReverseTape::HessianVectorProduct(const double* z, const double* v, double* out) const {
  // A zero-order sweep first: hess_vec reports a branch switch too, but then
  // leaks its work arrays (ADOL-C 2.7.2), and the sweep costs about one
  // evaluation of the tape, a fraction of the second-order sweep.
  double y = 0;
  if (zos_forward(tag_, 1, static_cast<int>(size_), /*keep=*/0, z, &y) < 0) return false;
  // hess_vec takes non-const pointers but reads them only.
  return hess_vec(tag_, static_cast<int>(size_), const_cast<double*>(z),
                  const_cast<double*>(v), out) >= 0;
}

}  // namespace internal
}  // namespace implicit

#endif  // IMPLICIT_HAVE_ADOLC
