// Batch-sized buffers a solver object keeps between its Solve calls (internal).
//
// A solve of et-digits' size (n = 256, B = 500) writes about ten n x B
// matrices (f(z), the proposals, the last iterates, the guard's trial points,
// the monitor's kept iterates, the evaluator's gathered columns) and its
// history (2 n memory B numbers). glibc serves blocks of these sizes by mmap
// and returns them when they are freed, so a solve that allocated them anew
// took a page fault for each 4 KiB it first wrote: a third of a repeated
// Broyden solve of that size. So a solver object keeps a pool of stashes (one
// per concurrent Solve call); a solve takes its matrices from one and gives
// them back when it ends:
//
//   mutable internal::BufferPool<Scalar> buffers_;          // in the solver
//   Summary Solve(...) const {
//     internal::SolveBuffers<Scalar> buffers(buffers_);      // first: ends last
//     internal::GuardedStepper<Scalar> stepper(..., buffers.stash());
//     Matrix<Scalar>& fz = buffers.Take(n, batch);           // contents unspecified
//     ...
//   }                                                        // all back in the stash
//
// A matrix taken from a stash holds whatever an earlier solve left there, as
// a new matrix holds whatever the allocator gives: code must write before it
// reads (the solvers' tests check that repeated solves of one solver object
// give bitwise what a new solver gives).
#pragma once

#include <implicit/core/types.h>
#include <implicit/core/workspace_pool.h>

#include <deque>
#include <utility>
#include <vector>

namespace implicit {
namespace internal {

// Matrices kept for later use, lent out by size. What a stash holds between
// two solves is what the last solve gave back: buffers it did not take (other
// sizes, from a solve of another batch size) are freed when it ends, so
// solves of varying sizes do not pile up memory.
template <typename Scalar>
class BufferStash {
 public:
  // A rows x cols matrix with unspecified contents: a buffer of rows x cols
  // numbers kept from the last solve when there is one (no allocation), else
  // a new one.
  Matrix<Scalar> Take(Index rows, Index cols) {
    for (std::size_t i = kept_.size(); i-- > 0;) {
      if (kept_[i].size() != rows * cols) continue;
      Matrix<Scalar> m = std::move(kept_[i]);
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
      m.resize(rows, cols);  // the same number of entries: no reallocation
      return m;
    }
    return Matrix<Scalar>(rows, cols);
  }
  // Keeps m's storage for the next solve; m is left empty.
  void Give(Matrix<Scalar>& m) {
    if (m.size() > 0) given_.push_back(std::move(m));
    m = Matrix<Scalar>();
  }
  // Ends a solve: the buffers given back are kept, the others freed.
  void EndSolve() {
    kept_ = std::move(given_);
    given_.clear();
  }
  // Numbers held for the next solve (for tests).
  Index numbers() const {
    Index total = 0;
    for (const Matrix<Scalar>& m : kept_) total += m.size();
    return total;
  }

 private:
  std::vector<Matrix<Scalar>> kept_, given_;
};

// m from the stash, or a new rows x cols matrix without one.
template <typename Scalar>
Matrix<Scalar> TakeOrAllocate(BufferStash<Scalar>* stash, Index rows, Index cols) {
  return stash != nullptr ? stash->Take(rows, cols) : Matrix<Scalar>(rows, cols);
}
// Gives m back to the stash, if there is one.
template <typename Scalar>
void GiveBack(BufferStash<Scalar>* stash, Matrix<Scalar>& m) {
  if (stash != nullptr) stash->Give(m);
}

// A solver object's stashes, one per concurrent Solve call.
template <typename Scalar>
using BufferPool = WorkspacePool<BufferStash<Scalar>>;

// The buffers of one solve: a stash from the solver's pool, and the matrices
// taken from it through Take, given back when the solve ends. Declare it
// before the objects that take buffers from stash(), so that it ends after
// them.
template <typename Scalar>
class SolveBuffers {
 public:
  explicit SolveBuffers(BufferPool<Scalar>& pool) : stash_(pool.Acquire()) {}
  SolveBuffers(const SolveBuffers&) = delete;
  SolveBuffers& operator=(const SolveBuffers&) = delete;
  ~SolveBuffers() {
    for (Matrix<Scalar>& m : lent_) stash_->Give(m);
    stash_->EndSolve();
  }
  // A rows x cols matrix (contents unspecified), lent until the solve ends.
  Matrix<Scalar>& Take(Index rows, Index cols) {
    lent_.push_back(stash_->Take(rows, cols));
    return lent_.back();  // a deque: references stay valid
  }
  BufferStash<Scalar>* stash() const { return stash_.get(); }

 private:
  typename BufferPool<Scalar>::Handle stash_;
  std::deque<Matrix<Scalar>> lent_;
};

}  // namespace internal
}  // namespace implicit
