// Checkpoint serialisation and atomic file I/O (see checkpoint.h).
//
// Payload of format version 1 (all integers little-endian; str = uint32
// length + bytes; f64 = IEEE-754 binary64 bits as a uint64):
//   int64 step
//   uint32 #metadata,       each: str key, str value
//   uint32 #parameter sets, each: str name, uint32 #tensors,
//                                 each: str name, int64 rows, int64 cols, f64[rows*cols]
//   uint32 #optimisers,     each: str name, str type, int64 step, uint32 #slots,
//                                 each: str name, uint64 size, f64[size]
#include <implicit/core/checkpoint.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace implicit {
namespace {

constexpr char kMagic[8] = {'I', 'M', 'P', 'L', 'C', 'K', 'P', 'T'};
constexpr std::size_t kHeaderSize = 8 + 4 + 4 + 8;
constexpr std::size_t kChecksumSize = 8;

std::uint64_t Fnv1a64(const char* data, std::size_t size) {
  std::uint64_t h = 14695981039346656037ULL;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

class Writer {
 public:
  void U32(std::uint32_t v) { Bytes(v, 4); }
  void U64(std::uint64_t v) { Bytes(v, 8); }
  void I64(std::int64_t v) { Bytes(static_cast<std::uint64_t>(v), 8); }
  void F64(double v) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    U64(bits);
  }
  void Str(const std::string& s) {
    if (s.size() > std::numeric_limits<std::uint32_t>::max())
      throw std::runtime_error("checkpoint: string too long to store");
    U32(static_cast<std::uint32_t>(s.size()));
    out_ += s;
  }
  void Values(const Vector<double>& v) {
    for (Index i = 0; i < v.size(); ++i) F64(v(i));
  }
  std::string& out() { return out_; }

 private:
  void Bytes(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& data, std::size_t begin, std::size_t end, const std::string& source)
      : data_(data), pos_(begin), begin_(begin), end_(end), source_(source) {}

  std::uint32_t U32() { return static_cast<std::uint32_t>(Bytes(4)); }
  std::uint64_t U64() { return Bytes(8); }
  std::int64_t I64() { return static_cast<std::int64_t>(Bytes(8)); }
  double F64() {
    const std::uint64_t bits = U64();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string Str(const char* what) {
    const std::uint32_t n = U32();
    Need(n, what);
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Vector<double> Values(std::uint64_t count, const char* what) {
    if (count > (end_ - pos_) / 8) Fail(std::string(what) + " claims more values than remain");
    Vector<double> v(static_cast<Index>(count));
    for (std::uint64_t i = 0; i < count; ++i) v(static_cast<Index>(i)) = F64();
    return v;
  }
  std::uint32_t Count(const char* what) {
    const std::uint32_t n = U32();
    // Every element takes at least 4 bytes: a larger count is malformed.
    if (n > (end_ - pos_) / 4) Fail(std::string("implausible number of ") + what);
    return n;
  }
  bool AtEnd() const { return pos_ == end_; }
  [[noreturn]] void Fail(const std::string& what) const {
    throw std::runtime_error(source_ + ": malformed checkpoint contents at payload byte " +
                             std::to_string(pos_ - begin_) + ": " + what);
  }

 private:
  void Need(std::size_t n, const char* what) {
    if (n > end_ - pos_) Fail(std::string("unexpected end of payload reading ") + what);
  }
  std::uint64_t Bytes(int n) {
    Need(static_cast<std::size_t>(n), "an integer");
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }
  const std::string& data_;
  std::size_t pos_, begin_, end_;
  const std::string& source_;
};

std::uint64_t ReadLE64(const std::string& s, std::size_t pos) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}
std::uint32_t ReadLE32(const std::string& s, std::size_t pos) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}

std::string SystemError(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// The temporary files of SaveCheckpoint(path) are named
// TemporaryPrefix(path) + writer pid + "." + 6 random characters.
std::string TemporaryPrefix(const std::string& path) { return path + ".tmp."; }

// Whether the process `pid` runs (a zombie counts as running).
bool ProcessRuns(long pid) {
  if (pid <= 0 || pid > 0x3fffffffL) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Whether `rest` (a temporary file name after the prefix) is left by a writer
// that no longer runs: "<pid>.XXXXXX" with a dead pid or this process's own
// (its writers have finished when it asks), or the older "XXXXXX" without pid.
bool StaleTemporary(const std::string& rest) {
  if (rest.size() == 6 && rest.find('.') == std::string::npos) return true;
  const std::size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 10 || rest.size() - dot - 1 != 6) return false;
  const std::string digits = rest.substr(0, dot);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return false;
  const long pid = std::stol(digits);
  return pid == static_cast<long>(::getpid()) || !ProcessRuns(pid);
}

}  // namespace

const std::vector<CheckpointTensor>& Checkpoint::Parameters(const std::string& name) const {
  auto it = parameter_sets_.find(name);
  if (it == parameter_sets_.end()) {
    std::string have;
    for (const auto& p : parameter_sets_) have += (have.empty() ? "" : ", ") + p.first;
    throw std::runtime_error("checkpoint has no parameter set '" + name + "' (it has: " +
                             (have.empty() ? "none" : have) + ")");
  }
  return it->second;
}

const OptimizerState& Checkpoint::Optimizer(const std::string& name) const {
  auto it = optimizers_.find(name);
  if (it == optimizers_.end()) {
    std::string have;
    for (const auto& p : optimizers_) have += (have.empty() ? "" : ", ") + p.first;
    throw std::runtime_error("checkpoint has no optimiser state '" + name + "' (it has: " +
                             (have.empty() ? "none" : have) + ")");
  }
  return it->second;
}

std::string Checkpoint::Serialize() const {
  Writer p;
  p.I64(step);
  p.U32(static_cast<std::uint32_t>(metadata.size()));
  for (const auto& kv : metadata) {
    p.Str(kv.first);
    p.Str(kv.second);
  }
  p.U32(static_cast<std::uint32_t>(parameter_sets_.size()));
  for (const auto& set : parameter_sets_) {
    p.Str(set.first);
    p.U32(static_cast<std::uint32_t>(set.second.size()));
    for (const CheckpointTensor& t : set.second) {
      if (t.values.size() != t.rows * t.cols)
        throw std::runtime_error("checkpoint tensor '" + t.name + "': values do not match shape");
      p.Str(t.name);
      p.I64(t.rows);
      p.I64(t.cols);
      p.Values(t.values);
    }
  }
  p.U32(static_cast<std::uint32_t>(optimizers_.size()));
  for (const auto& opt : optimizers_) {
    const OptimizerState& s = opt.second;
    if (s.slot_names.size() != s.slots.size())
      throw std::runtime_error("checkpoint optimiser '" + opt.first + "': slot names/values differ");
    p.Str(opt.first);
    p.Str(s.type);
    p.I64(s.step);
    p.U32(static_cast<std::uint32_t>(s.slots.size()));
    for (std::size_t i = 0; i < s.slots.size(); ++i) {
      p.Str(s.slot_names[i]);
      p.U64(static_cast<std::uint64_t>(s.slots[i].size()));
      p.Values(s.slots[i]);
    }
  }
  const std::string& payload = p.out();

  Writer file;
  file.out().append(kMagic, sizeof kMagic);
  file.U32(kFormatVersion);
  file.U32(0);
  file.U64(payload.size());
  file.out() += payload;
  file.U64(Fnv1a64(payload.data(), payload.size()));
  return std::move(file.out());
}

Checkpoint Checkpoint::Deserialize(const std::string& bytes, const std::string& source) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    if (bytes.size() < sizeof kMagic && std::memcmp(bytes.data(), kMagic, bytes.size()) == 0)
      throw std::runtime_error(source + ": truncated checkpoint (" + std::to_string(bytes.size()) +
                               " bytes, shorter than its " + std::to_string(kHeaderSize) +
                               "-byte header)");
    throw std::runtime_error(source + ": not a libimplicit checkpoint (bad magic header)");
  }
  if (bytes.size() < kHeaderSize)
    throw std::runtime_error(source + ": truncated checkpoint (" + std::to_string(bytes.size()) +
                             " bytes, shorter than its " + std::to_string(kHeaderSize) +
                             "-byte header)");
  const std::uint32_t version = ReadLE32(bytes, 8);
  if (version != kFormatVersion)
    throw std::runtime_error(source + ": unsupported checkpoint format version " +
                             std::to_string(version) + " (this build reads version " +
                             std::to_string(kFormatVersion) + ")");
  const std::uint64_t payload_size = ReadLE64(bytes, 16);
  const std::uint64_t available = bytes.size() - kHeaderSize;
  if (payload_size > available || available - payload_size < kChecksumSize)
    throw std::runtime_error(source + ": truncated checkpoint (header declares " +
                             std::to_string(payload_size) + " payload bytes plus an " +
                             std::to_string(kChecksumSize) + "-byte checksum, but only " +
                             std::to_string(available) + " bytes follow the header)");
  if (available - payload_size > kChecksumSize)
    throw std::runtime_error(source + ": corrupt checkpoint (" +
                             std::to_string(available - payload_size - kChecksumSize) +
                             " unexpected bytes after the checksum)");
  const std::uint64_t stored = ReadLE64(bytes, kHeaderSize + payload_size);
  const std::uint64_t actual = Fnv1a64(bytes.data() + kHeaderSize, payload_size);
  if (stored != actual)
    throw std::runtime_error(source + ": corrupt checkpoint (checksum mismatch: the contents "
                             "were modified or damaged)");

  Reader r(bytes, kHeaderSize, kHeaderSize + payload_size, source);
  Checkpoint c;
  c.step = r.I64();
  const std::uint32_t num_meta = r.Count("metadata entries");
  for (std::uint32_t i = 0; i < num_meta; ++i) {
    std::string key = r.Str("a metadata key");
    c.metadata[key] = r.Str("a metadata value");
  }
  const std::uint32_t num_sets = r.Count("parameter sets");
  for (std::uint32_t i = 0; i < num_sets; ++i) {
    std::string name = r.Str("a parameter set name");
    const std::uint32_t num_tensors = r.Count("parameters");
    std::vector<CheckpointTensor> tensors;
    for (std::uint32_t j = 0; j < num_tensors; ++j) {
      CheckpointTensor t;
      t.name = r.Str("a parameter name");
      t.rows = static_cast<Index>(r.I64());
      t.cols = static_cast<Index>(r.I64());
      if (t.rows < 0 || t.cols < 0 || (t.cols > 0 && t.rows > std::numeric_limits<Index>::max() / t.cols))
        r.Fail("parameter '" + t.name + "' has an invalid shape");
      t.values = r.Values(static_cast<std::uint64_t>(t.rows * t.cols), "a parameter");
      tensors.push_back(std::move(t));
    }
    c.parameter_sets_[name] = std::move(tensors);
  }
  const std::uint32_t num_opt = r.Count("optimiser states");
  for (std::uint32_t i = 0; i < num_opt; ++i) {
    std::string name = r.Str("an optimiser name");
    OptimizerState s;
    s.type = r.Str("an optimiser type");
    s.step = r.I64();
    const std::uint32_t num_slots = r.Count("optimiser slots");
    for (std::uint32_t j = 0; j < num_slots; ++j) {
      s.slot_names.push_back(r.Str("a slot name"));
      const std::uint64_t size = r.U64();
      s.slots.push_back(r.Values(size, "an optimiser slot"));
    }
    c.optimizers_[name] = std::move(s);
  }
  if (!r.AtEnd()) r.Fail("unexpected bytes after the last optimiser state");
  return c;
}

void SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint) {
  if (path.empty()) throw std::invalid_argument("SaveCheckpoint: empty path");
  const std::string bytes = checkpoint.Serialize();
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string tmp = TemporaryPrefix(path) + std::to_string(::getpid()) + ".XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) throw std::runtime_error(SystemError("cannot create temporary checkpoint file next to", path));
  tmp = name.data();
  auto fail = [&](const std::string& what) {
    const std::string message = SystemError(what, tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(message);
  };
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write checkpoint");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) fail("cannot set permissions of checkpoint");
  if (::fsync(fd) != 0) fail("cannot fsync checkpoint");
  if (::close(fd) != 0) {
    const std::string message = SystemError("cannot close checkpoint", tmp);
    ::unlink(tmp.c_str());
    throw std::runtime_error(message);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string message = SystemError("cannot rename checkpoint to", path);
    ::unlink(tmp.c_str());
    throw std::runtime_error(message);
  }
  // Make the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Checkpoint LoadCheckpoint(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error(SystemError("cannot open checkpoint", path));
  // A directory, FIFO or device is no checkpoint (reading one fails deep in
  // the stream library, blocks or never ends).
  if (S_ISDIR(st.st_mode)) throw std::runtime_error("cannot read checkpoint '" + path + "': it is a directory");
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error("cannot read checkpoint '" + path + "': not a regular file");
  std::string bytes;
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(SystemError("cannot open checkpoint", path));
    bytes.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw std::runtime_error(SystemError("cannot read checkpoint", path));
  } catch (const std::ios_base::failure& e) {
    throw std::runtime_error("cannot read checkpoint '" + path + "': " + e.what());
  }
  if (bytes.empty()) throw std::runtime_error("checkpoint '" + path + "': truncated checkpoint (empty file)");
  return Checkpoint::Deserialize(bytes, "checkpoint '" + path + "'");
}

}  // namespace implicit

namespace implicit {

std::vector<std::string> RemoveStaleCheckpointTemporaries(const std::string& path) {
  std::vector<std::string> removed;
  if (path.empty()) return removed;
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string prefix = TemporaryPrefix(slash == std::string::npos ? path : path.substr(slash + 1));
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return removed;
  std::vector<std::string> stale;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (StaleTemporary(name.substr(prefix.size()))) stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale) {
    const std::string file = (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + name;
    struct stat st;
    // Only plain files: never follow a link or remove a directory.
    if (::lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::unlink(file.c_str()) == 0)
      removed.push_back(file);
  }
  return removed;
}

}  // namespace implicit
