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
// columns are copied out. All buffers are allocated in the constructor.
#pragma once

#include <implicit/core/map.h>
#include <implicit/solvers/internal/batch_monitor.h>

#include <vector>

namespace implicit {
namespace internal {

template <typename Scalar>
class BatchEvaluator {
 public:
  // with_energy: also evaluate E (requires map.energy() != nullptr).
  BatchEvaluator(const FixedPointMap<Scalar>& map, Index batch, bool with_energy)
      : map_(map),
        with_energy_(with_energy),
        subsets_(map.SupportsColumnSubsets()),
        points_(map.dimension(), batch),
        values_(map.dimension(), batch),
        energies_(batch) {}

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
  Matrix<Scalar> points_, values_;  // gathered points and their images
  Vector<Scalar> energies_;
};

// Whether a solver with these options uses the map's energy.
template <typename Scalar>
bool UsesEnergy(const SolverOptions& options, const FixedPointMap<Scalar>& map) {
  return options.use_energy && map.energy() != nullptr;
}

}  // namespace internal
}  // namespace implicit
