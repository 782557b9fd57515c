/// \file
/// Checkpoints: save and restore a training run's parameters and optimiser
/// state in a versioned binary file, written atomically.
///
/// A Checkpoint holds named parameter sets (each a list of named matrices, the
/// layout of a ParameterSet), named optimiser states, a step counter and
/// free-form string metadata. SaveCheckpoint writes it to a temporary file in
/// the destination's directory, fsyncs it and renames it over the destination,
/// so a crash never leaves a half-written checkpoint under the real name; the
/// temporary files a killed writer leaves behind (`<path>.tmp.<pid>.XXXXXX`)
/// are removed by RemoveStaleCheckpointTemporaries, e.g.\ when a run starts.
/// LoadCheckpoint verifies magic, version, sizes and a checksum and throws
/// std::runtime_error with a message naming the file and what is wrong
/// (truncated, not a checkpoint, unsupported version, checksum mismatch).
/// Restoring into a model of a different shape throws std::runtime_error naming
/// the parameter and both shapes.
///
/// \code
///   implicit::Checkpoint ckpt;
///   ckpt.step = step;
///   ckpt.metadata["model"] = "energy-transformer";
///   ckpt.AddParameters("model", params);          // ParameterSet<S>
///   ckpt.AddOptimizer("adam", adam.state());
///   implicit::SaveCheckpoint("run/ckpt.bin", ckpt);
///
///   implicit::Checkpoint loaded = implicit::LoadCheckpoint("run/ckpt.bin");
///   loaded.RestoreParameters("model", &params);   // throws on a shape mismatch
///   adam.SetState(loaded.Optimizer("adam"), params.size());
/// \endcode
///
/// File format (version 1, all integers little-endian):
/// \verbatim
///   bytes 0..7    magic "IMPLCKPT"
///   uint32        format version (1)
///   uint32        reserved (0)
///   uint64        payload size P in bytes
///   P bytes       payload (see checkpoint.cc)
///   uint64        FNV-1a 64-bit hash of the payload
/// \endverbatim
/// Values are stored as IEEE-754 float64, so float and double models both
/// round-trip exactly.
#pragma once

#include <implicit/core/optimizers.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

/// One named matrix of a parameter set, stored in double precision.
struct CheckpointTensor {
  std::string name;       ///< The parameter's name in its ParameterSet.
  Index rows = 0;         ///< Number of rows of the matrix.
  Index cols = 0;         ///< Number of columns of the matrix.
  Vector<double> values;  ///< column-major, rows * cols entries
};

/// The contents of a checkpoint file: named parameter sets, named optimiser
/// states, a step counter and free-form string metadata.
class Checkpoint {
 public:
  /// The version of the file format that Serialize writes and Deserialize reads.
  static constexpr std::uint32_t kFormatVersion = 1;

  std::int64_t step = 0;                          ///< A step counter, e.g.\ training steps done.
  std::map<std::string, std::string> metadata;    ///< free-form key/value pairs

  /// Stores (a copy of) a parameter set under `name`, replacing any previous one.
  template <typename Scalar>
  void AddParameters(const std::string& name, const ParameterSet<Scalar>& params) {
    std::vector<CheckpointTensor> tensors;
    for (const auto& e : params.entries()) {
      CheckpointTensor t;
      t.name = e.name;
      t.rows = e.rows;
      t.cols = e.cols;
      t.values = params.values().segment(e.offset, e.size()).template cast<double>();
      tensors.push_back(std::move(t));
    }
    parameter_sets_[name] = std::move(tensors);
  }

  /// Copies the stored set `name` into `params`, which must have exactly the
  /// same blocks (names, order and shapes).
  /// \throws std::runtime_error naming the parameter and both shapes on a
  ///   mismatch, or when no set `name` is stored; `params` is unchanged then.
  /// \throws std::invalid_argument when `params` is null.
  template <typename Scalar>
  void RestoreParameters(const std::string& name, ParameterSet<Scalar>* params) const {
    if (params == nullptr) throw std::invalid_argument("Checkpoint::RestoreParameters: null params");
    const std::vector<CheckpointTensor>& tensors = Parameters(name);
    const auto& entries = params->entries();
    for (const auto& e : entries) {
      const CheckpointTensor* t = nullptr;
      for (const auto& c : tensors) {
        if (c.name == e.name) t = &c;
      }
      if (t == nullptr) {
        throw std::runtime_error("checkpoint parameter set '" + name + "' has no parameter '" +
                                 e.name + "' (model expects " + Shape(e.rows, e.cols) +
                                 "); the checkpoint was written for a different model");
      }
      if (t->rows != e.rows || t->cols != e.cols) {
        throw std::runtime_error("checkpoint parameter '" + name + "/" + e.name + "' has shape " +
                                 Shape(t->rows, t->cols) + " but the model expects " +
                                 Shape(e.rows, e.cols));
      }
    }
    for (const auto& c : tensors) {
      if (!params->Contains(c.name)) {
        throw std::runtime_error("checkpoint parameter '" + name + "/" + c.name + "' (" +
                                 Shape(c.rows, c.cols) +
                                 ") does not exist in the model; the checkpoint was written "
                                 "for a different model");
      }
    }
    for (const auto& c : tensors) {
      const auto& e = params->GetEntry(c.name);
      params->values().segment(e.offset, e.size()) = c.values.template cast<Scalar>();
    }
  }

  /// Whether a parameter set `name` is stored.
  bool HasParameters(const std::string& name) const { return parameter_sets_.count(name) > 0; }
  /// The stored set `name`.
  /// \throws std::runtime_error when absent (the message lists the stored sets).
  const std::vector<CheckpointTensor>& Parameters(const std::string& name) const;
  /// All stored parameter sets, by name.
  const std::map<std::string, std::vector<CheckpointTensor>>& parameter_sets() const {
    return parameter_sets_;
  }

  /// Stores (a copy of) an optimiser state under `name`, replacing any previous one.
  void AddOptimizer(const std::string& name, const OptimizerState& state) {
    optimizers_[name] = state;
  }
  /// Whether an optimiser state `name` is stored.
  bool HasOptimizer(const std::string& name) const { return optimizers_.count(name) > 0; }
  /// The stored optimiser state `name`.
  /// \throws std::runtime_error when absent (the message lists the stored states).
  const OptimizerState& Optimizer(const std::string& name) const;
  /// All stored optimiser states, by name.
  const std::map<std::string, OptimizerState>& optimizers() const { return optimizers_; }

  /// Serialises to the file format above (header, payload and checksum).
  /// \throws std::runtime_error when a string is too long to store.
  std::string Serialize() const;
  /// Parses the file format above, verifying magic, version, sizes and checksum.
  /// \param bytes the whole file's contents.
  /// \param source names the bytes in error messages (e.g.\ the file).
  /// \throws std::runtime_error with the message `<source>: <problem>` on any problem.
  static Checkpoint Deserialize(const std::string& bytes, const std::string& source = "checkpoint");

 private:
  static std::string Shape(Index rows, Index cols) {
    std::ostringstream s;
    s << rows << "x" << cols;
    return s.str();
  }
  std::map<std::string, std::vector<CheckpointTensor>> parameter_sets_;
  std::map<std::string, OptimizerState> optimizers_;
};

/// Writes `checkpoint` to `path` atomically.
///
/// Atomically: temporary file `<path>.tmp.<pid>.XXXXXX` in the same
/// directory, fsync, rename, fsync of the directory.
/// \throws std::runtime_error naming the path and the system error on failure;
///   the destination is then left as it was.
/// \throws std::invalid_argument when `path` is empty.
void SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint);

/// Reads and verifies a checkpoint.
/// \throws std::runtime_error naming the path and the problem (missing, a
///   directory or not a regular file, unreadable, truncated, bad magic,
///   unsupported version, checksum mismatch, malformed contents).
Checkpoint LoadCheckpoint(const std::string& path);

/// Removes the temporary files that SaveCheckpoint(path) writers left next to
/// `path` when they were killed before renaming.
///
/// These are `<path>.tmp.<pid>.XXXXXX`
/// whose writer process no longer runs (or is this process: call it before
/// this process saves `path`), and `<path>.tmp.XXXXXX` of older versions. Only
/// regular files are removed; `path` itself is not touched.
/// \return the paths removed (none when the directory cannot be read).
std::vector<std::string> RemoveStaleCheckpointTemporaries(const std::string& path);

}  // namespace implicit
