// Evaluates a map (and its energy) at selected columns of a batch: the active
// set of the forward solvers (internal).
//
// A solver keeps its per-sample state in full n x B matrices indexed by
// sample. When only some samples need f (the others have converged, or wait
// while their neighbours backtrack), Evaluate() gathers those columns into one
// contiguous n x A block, evaluates f (and E) there with ONE call, and
// scatters the results back — so a batch evaluation costs GEMMs of the active
// width A, not B. The gathered block goes to the map's EvaluateColumns, so
// maps with per-sample data take part when they SupportsColumnSubsets(); the
// others are evaluated on the whole batch instead and only the requested
// columns are copied out. All buffers are allocated (or taken from the
// solver's stash, internal/buffer_stash.h) in the constructor.
//
// KeepLinearizations() (Newton-CG) evaluates through the map's
// EvaluateWithEnergyAndLinearize and keeps, for every sample, the Jacobian at
// the point where it was last evaluated: a guarded step evaluates a sample
// until it accepts a point, so that is the sample's accepted point.
#pragma once

#include <implicit/core/linearization.h>
#include <implicit/core/map.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/buffer_stash.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace implicit {
namespace internal {

template <typename Scalar>
class BatchEvaluator {
 public:
  // with_energy: also evaluate E (requires map.energy() != nullptr). The
  // gathered columns' buffers come from `stash` when there is one (given back
  // when the evaluator ends).
  BatchEvaluator(const FixedPointMap<Scalar>& map, Index batch, bool with_energy,
                 BufferStash<Scalar>* stash = nullptr)
      : map_(map),
        with_energy_(with_energy),
        subsets_(map.SupportsColumnSubsets()),
        stash_(stash),
        points_(TakeOrAllocate(stash, map.dimension(), batch)),
        values_(TakeOrAllocate(stash, map.dimension(), batch)),
        energies_(batch) {}
  BatchEvaluator(const BatchEvaluator&) = delete;
  BatchEvaluator& operator=(const BatchEvaluator&) = delete;
  ~BatchEvaluator() {
    GiveBack(stash_, points_);
    GiveBack(stash_, values_);
  }

  // From now on (keep = true), keep every sample's Jacobian at its last
  // evaluated point (see above); false forgets them. Needs with_energy() and a
  // map that SupportsSubsets() (compacted points carry no per-sample data).
  void KeepLinearizations(bool keep) {
    if (keep && !(with_energy_ && map_.SupportsSubsets())) {
      throw std::logic_error("BatchEvaluator::KeepLinearizations: needs an energy and a map that supports subsets");
    }
    keep_ = keep;
    kept_.assign(keep ? static_cast<std::size_t>(energies_.size()) : 0, nullptr);
    kept_column_.assign(kept_.size(), 0);
  }
  // The Jacobian at sample b's last evaluated point (KeepLinearizations), and
  // b's column in it.
  const Linearization<Scalar>* linearization(Index b) const { return kept_[static_cast<std::size_t>(b)].get(); }
  Index linearization_column(Index b) const { return kept_column_[static_cast<std::size_t>(b)]; }

  bool with_energy() const { return with_energy_; }
  // False: every evaluation is of the whole batch (see above).
  bool supports_subsets() const { return subsets_; }

  // For every b in `columns` (ascending, no repeats): f.col(b) = f(points.col(b))
  // and, with_energy(), (*energies)(b) = E(points.col(b)). Other columns of f
  // and *energies are left as they are. Without subset support every column
  // of `points` is evaluated, so all of them must hold finite states (e.g. the
  // current iterates).
  void Evaluate(ConstMatrixRef<Scalar> points, const std::vector<Index>& columns,
                MatrixRef<Scalar> f, Vector<Scalar>* energies, BatchMonitor<Scalar>* monitor) {
    const Index batch = points.cols();
    const Index count = static_cast<Index>(columns.size());
    if (count == 0) return;
    if (keep_) {
      EvaluateAndKeep(points, columns, f, energies);
      monitor->CountEvaluations(columns);
      return;
    }
    if (count == batch) {  // the whole batch: no gather or scatter
      Call(points, f, energies == nullptr ? energies_ : *energies);
      monitor->CountEvaluations(columns);
      return;
    }
    if (!subsets_) {
      Call(points, values_, energies_);
      Scatter(columns, count, /*compact=*/false, f, energies);
      monitor->CountEvaluations(1);  // B columns were evaluated
      return;
    }
    for (Index j = 0; j < count; ++j) points_.col(j) = points.col(columns[j]);
    if (with_energy_) {
      map_.EvaluateColumnsWithEnergy(points_.leftCols(count), columns, values_.leftCols(count),
                                     energies_.head(count));
    } else {
      map_.EvaluateColumns(points_.leftCols(count), columns, values_.leftCols(count));
    }
    Scatter(columns, count, /*compact=*/true, f, energies);
    monitor->CountEvaluations(columns);
  }

 private:
  void EvaluateAndKeep(ConstMatrixRef<Scalar> points, const std::vector<Index>& columns, MatrixRef<Scalar> f,
                       Vector<Scalar>* energies) {
    const Index count = static_cast<Index>(columns.size());
    std::shared_ptr<const Linearization<Scalar>> jacobian;
    if (count == points.cols()) {
      jacobian = map_.EvaluateWithEnergyAndLinearize(points, f, energies == nullptr ? energies_ : *energies);
    } else {
      for (Index j = 0; j < count; ++j) points_.col(j) = points.col(columns[j]);
      jacobian = map_.EvaluateWithEnergyAndLinearize(points_.leftCols(count), values_.leftCols(count),
                                                     energies_.head(count));
      Scatter(columns, count, /*compact=*/true, f, energies);
    }
    for (Index j = 0; j < count; ++j) {
      const auto b = static_cast<std::size_t>(columns[j]);
      kept_[b] = jacobian;
      kept_column_[b] = j;  // (the whole batch: columns[j] = j)
    }
  }
  void Call(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out, VectorRef<Scalar> e) const {
    if (with_energy_) {
      map_.EvaluateWithEnergy(z, out, e);
    } else {
      map_.Evaluate(z, out);
    }
  }
  void Scatter(const std::vector<Index>& columns, Index count, bool compact,
               MatrixRef<Scalar> f, Vector<Scalar>* energies) const {
    for (Index j = 0; j < count; ++j) {
      const Index b = columns[j], from = compact ? j : b;
      f.col(b) = values_.col(from);
      if (with_energy_ && energies != nullptr) (*energies)(b) = energies_(from);
    }
  }

  const FixedPointMap<Scalar>& map_;
  const bool with_energy_;
  const bool subsets_;
  BufferStash<Scalar>* const stash_;  // where points_ and values_ came from (or nullptr)
  Matrix<Scalar> points_, values_;  // gathered points and their images
  Vector<Scalar> energies_;
  bool keep_ = false;
  std::vector<std::shared_ptr<const Linearization<Scalar>>> kept_;  // per sample (KeepLinearizations)
  std::vector<Index> kept_column_;
};

// Whether a solver with these options uses the map's energy.
template <typename Scalar>
bool UsesEnergy(const SolverOptions& options, const FixedPointMap<Scalar>& map) {
  return options.use_energy && map.energy() != nullptr;
}

}  // namespace internal
}  // namespace implicit
