/// \file
/// Named, trainable parameters stored in one flat vector.
///
/// A layer registers its parameter blocks (matrices) by name; the values live
/// contiguously in `values()`, so optimisers, gradients and checkpoints work on
/// one vector whose layout is described by `entries()`. A gradient with respect
/// to the parameters is a vector of the same size and layout.
///
/// \code
///   implicit::ParameterSet<double> p;
///   p.Add("W", 16, 16);               // zero-initialised 16x16 block
///   p.Add("b", 16, 1);
///   p.Block("W").setRandom();         // Eigen::Map view into values()
///   implicit::Vector<double> grad(p.size());
/// \endcode
///
/// Add every block before taking views: Add() may reallocate the storage.
#pragma once

#include <implicit/core/types.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {

/// Named, trainable parameter blocks (matrices) stored contiguously in one flat vector.
///
/// The layout of values() is described by entries(); a gradient with respect to
/// the parameters is a vector of the same size and layout. Add() may reallocate
/// values(), so take Block() views after the last Add().
template <typename Scalar>
class ParameterSet {
 public:
  /// One registered block: its name, shape and position in values().
  struct Entry {
    /// Name the block was added under.
    std::string name;
    /// Number of rows of the block.
    Index rows = 0;
    /// Number of columns of the block.
    Index cols = 0;
    Index offset = 0;  ///< Position of element (0,0) in values().
    /// Number of values in the block, rows * cols.
    Index size() const { return rows * cols; }
  };
  /// Writable view of one block (an Eigen::Map into a flat vector).
  using BlockMap = Eigen::Map<Matrix<Scalar>>;
  /// Read-only view of one block.
  using ConstBlockMap = Eigen::Map<const Matrix<Scalar>>;

  /// Adds a zero-initialised rows x cols block; returns its offset.
  /// \throws std::invalid_argument when `name` is empty or already used, or a size is negative.
  Index Add(const std::string& name, Index rows, Index cols) {
    if (name.empty()) throw std::invalid_argument("ParameterSet::Add: empty name");
    if (rows < 0 || cols < 0) {
      throw std::invalid_argument("ParameterSet::Add(" + name +
                                  "): negative size");
    }
    if (Find(name) != nullptr) {
      throw std::invalid_argument("ParameterSet::Add: duplicate name '" +
                                  name + "'");
    }
    const Index offset = values_.size();
    entries_.push_back({name, rows, cols, offset});
    values_.conservativeResize(offset + rows * cols);
    values_.segment(offset, rows * cols).setZero();
    return offset;
  }

  /// Whether a block called `name` was added.
  bool Contains(const std::string& name) const { return Find(name) != nullptr; }
  /// The entry of the block called `name`.
  /// \throws std::invalid_argument when there is no block called `name`.
  const Entry& GetEntry(const std::string& name) const {
    const Entry* e = Find(name);
    if (e == nullptr) {
      throw std::invalid_argument("ParameterSet: no parameter named '" + name +
                                  "'");
    }
    return *e;
  }

  ///@{
  /// View of the block called `name` inside values() (invalidated by a later Add()).
  /// \throws std::invalid_argument when there is no block called `name`.
  BlockMap Block(const std::string& name) { return BlockOf(values_, name); }
  ConstBlockMap Block(const std::string& name) const {
    const Entry& e = GetEntry(name);
    return ConstBlockMap(values_.data() + e.offset, e.rows, e.cols);
  }
  ///@}
  ///@{
  /// The block called `name` inside another vector of this layout (a gradient).
  /// \throws std::invalid_argument when there is no block called `name`, or `flat`'s size
  ///         is not size().
  BlockMap BlockOf(Vector<Scalar>& flat, const std::string& name) const {
    const Entry& e = GetEntry(name);
    internal::CheckShape("ParameterSet::BlockOf(flat)", flat, size(), 1);
    return BlockMap(flat.data() + e.offset, e.rows, e.cols);
  }
  BlockMap BlockOf(VectorRef<Scalar> flat, const std::string& name) const {
    const Entry& e = GetEntry(name);
    internal::CheckShape("ParameterSet::BlockOf(flat)", flat, size(), 1);
    return BlockMap(flat.data() + e.offset, e.rows, e.cols);
  }
  ///@}

  /// Total number of parameter values, the length of values().
  Index size() const { return values_.size(); }
  ///@{
  /// The flat vector of all parameter values, the blocks in the order they were added.
  Vector<Scalar>& values() { return values_; }
  const Vector<Scalar>& values() const { return values_; }
  ///@}
  /// The registered blocks in the order they were added, with their offsets in values().
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  const Entry* Find(const std::string& name) const {
    for (const Entry& e : entries_) {
      if (e.name == name) return &e;
    }
    return nullptr;
  }

  std::vector<Entry> entries_;
  Vector<Scalar> values_;
};

}  // namespace implicit
