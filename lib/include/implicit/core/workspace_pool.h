/// \file
/// Scratch memory kept between calls of const member functions that must stay
/// thread-safe. A call takes a workspace from the pool (made on first demand)
/// and the handle gives it back when the call ends; concurrent calls get
/// different workspaces. Once each of k concurrent callers has called once,
/// workspaces whose matrices keep their sizes allocate nothing more: for the
/// large per-graph caches of the graph Energy Transformer (megabytes on
/// reddit), this saves the allocation and the page faults of every call.
/// Copying or moving the owner gives the copy an empty pool (a workspace is
/// scratch, not state).
///
/// \code
///   struct Work { Matrix<double> a, b; };
///   mutable WorkspacePool<Work> pool_;
///   void Layer::Apply(...) const {
///     auto w = pool_.Acquire();   // Work&: *w, w->a
///     ...
///   }                             // back in the pool
/// \endcode
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace implicit {

/// A thread-safe pool of scratch workspaces of type T (default-constructed on
/// demand), lent out by Acquire() and given back when the handle ends.
///
/// Copying or moving a pool gives an empty pool (a workspace is scratch, not state).
template <typename T>
class WorkspacePool {
 public:
  /// A workspace lent by Acquire(); returned to the pool on destruction.
  class Handle {
   public:
    /// Lends `item`, which goes back to `pool` when the handle is destroyed.
    Handle(WorkspacePool* pool, std::unique_ptr<T> item) : pool_(pool), item_(std::move(item)) {}
    /// Takes over other's workspace (other then gives nothing back).
    Handle(Handle&& other) noexcept = default;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    Handle& operator=(Handle&&) = delete;
    ~Handle() {
      if (item_) pool_->Release(std::move(item_));
    }
    ///@{
    /// The lent workspace.
    T& operator*() const { return *item_; }
    T* operator->() const { return item_.get(); }
    T* get() const { return item_.get(); }
    ///@}

   private:
    WorkspacePool* pool_;
    std::unique_ptr<T> item_;
  };

  /// An empty pool.
  WorkspacePool() = default;
  ///@{
  /// Copy or move construction makes an empty pool, and copy or move
  /// assignment leaves both pools as they are (a workspace is scratch, not state).
  WorkspacePool(const WorkspacePool&) {}
  WorkspacePool(WorkspacePool&&) noexcept {}
  WorkspacePool& operator=(const WorkspacePool&) { return *this; }
  WorkspacePool& operator=(WorkspacePool&&) noexcept { return *this; }
  ///@}

  /// A workspace no other caller holds: the last one given back, or a new T.
  Handle Acquire() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        std::unique_ptr<T> item = std::move(free_.back());
        free_.pop_back();
        return Handle(this, std::move(item));
      }
    }
    return Handle(this, std::make_unique<T>());
  }

  /// Workspaces waiting in the pool (not lent out).
  std::size_t available() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return free_.size();
  }

 private:
  void Release(std::unique_ptr<T> item) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(item));  // the vector's capacity grows only with the number of concurrent callers
  }

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<T>> free_;
};

}  // namespace implicit
