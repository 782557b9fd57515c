// Private to the library (not installed): drives B per-sample Ceres
// minimisations in lockstep so that every evaluation any sample asks for is
// served by ONE batched call of the map or energy.
//
// Why: a FixedPointMap evaluates whole batches, and a map conditioned on an
// input (a DEQ layer f(z; x)) cannot evaluate one column on its own. Ceres,
// however, owns the control flow of its minimiser and calls back into a cost
// function one sample at a time. Each sample therefore runs its ceres::Solve on
// a worker thread whose cost function posts a Request and blocks; whenever no
// worker is computing, the coordinating (calling) thread serves every pending
// request with one batched call, or, when all live workers have reached the end
// of an iteration (an IterationCallback), lets the solver observe the batch and
// decide which samples go on. So samples stay independent (own trust region /
// line search, own termination) while the map is only ever called from the
// calling thread, on full batches. Workers compute their Ceres steps
// concurrently between barriers.
#pragma once

#include <implicit/solvers/solver.h>

#include <ceres/iteration_callback.h>
#include <ceres/types.h>

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace implicit {
namespace internal {

class Lockstep {
 public:
  // One evaluation a worker asks for. The pointers stay valid while the worker
  // is blocked; the server fills the outputs and sets ok.
  struct Request {
    int sample = -1;
    const double* point = nullptr;  // the sample's evaluation point
    double* out_value = nullptr;    // solver-defined outputs (may be null)
    double* out_vector = nullptr;
    double* out_matrix = nullptr;
    bool ok = false;
  };

  explicit Lockstep(int num_workers)
      : state_(num_workers, State::kRunning),
        reported_(num_workers, 0),
        decision_(num_workers, 0),
        wake_(new std::condition_variable[num_workers]) {}

  // ---- worker side (called from the worker threads) -----------------------
  // Posts the request and blocks until it has been served. Returns
  // request->ok; false at once when the run was aborted.
  bool Evaluate(Request* request) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_) return false;
    const int b = request->sample;
    pending_.push_back(request);
    Block(b, State::kWaitingEvaluation, &lock);
    return request->ok && !aborted_;
  }

  // Reports that sample b finished an iteration; blocks until the solver has
  // observed the batch. Returns true when the sample should continue.
  bool EndIteration(int b) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_) return false;
    Block(b, State::kWaitingIteration, &lock);
    return decision_[b] != 0 && !aborted_;
  }

  // ---- calling thread -------------------------------------------------------
  // Runs body(b) for every sample b on its own thread and coordinates them
  // until all have returned:
  //  * serve(requests): every pending request, all served by one batched call;
  //  * observe(at_barrier, finished, decision): called when every live worker
  //    waits at the end of an iteration (at_barrier) and/or some workers have
  //    returned since the last call (finished); it sets decision[b] (1 =
  //    continue) for the samples at the barrier.
  // The first exception thrown by serve, observe or a body aborts every worker
  // and is rethrown once all threads have been joined.
  using ServeFn = std::function<void(std::vector<Request*>&)>;
  using ObserveFn = std::function<void(const std::vector<int>&, const std::vector<int>&,
                                       std::vector<char>*)>;
  void Run(const std::function<void(int)>& body, const ServeFn& serve,
           const ObserveFn& observe) {
    const int n = static_cast<int>(state_.size());
    running_ = n;
    std::vector<std::thread> threads;
    threads.reserve(n);
    try {
      for (int b = 0; b < n; ++b) {
        threads.emplace_back([this, b, &body] {
          try {
            body(b);
          } catch (...) {
            std::lock_guard<std::mutex> guard(mutex_);
            AbortLocked(std::current_exception());
          }
          std::lock_guard<std::mutex> guard(mutex_);
          state_[b] = State::kFinished;
          if (--running_ == 0) main_wake_.notify_one();
        });
      }
    } catch (...) {  // could not start a thread: stop the ones that run
      {
        std::lock_guard<std::mutex> guard(mutex_);
        running_ -= n - static_cast<int>(threads.size());
        for (int b = static_cast<int>(threads.size()); b < n; ++b) {
          state_[b] = State::kFinished;
          reported_[b] = 1;
        }
        AbortLocked(std::current_exception());
      }
      Coordinate(serve, observe);
      for (std::thread& t : threads) t.join();
      std::rethrow_exception(error_);
    }
    Coordinate(serve, observe);
    for (std::thread& t : threads) t.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  enum class State { kRunning, kWaitingEvaluation, kWaitingIteration, kFinished };

  // Called with the lock held: marks b as waiting and sleeps until released.
  void Block(int b, State waiting, std::unique_lock<std::mutex>* lock) {
    state_[b] = waiting;
    if (--running_ == 0) main_wake_.notify_one();
    wake_[b].wait(*lock, [this, b] { return state_[b] == State::kRunning; });
  }

  void Release(int b) {
    state_[b] = State::kRunning;
    ++running_;
    wake_[b].notify_one();
  }

  void AbortLocked(std::exception_ptr error) {
    if (!error_) error_ = error;
    aborted_ = true;
  }

  void Coordinate(const ServeFn& serve, const ObserveFn& observe) {
    const int n = static_cast<int>(state_.size());
    std::unique_lock<std::mutex> lock(mutex_);
    std::vector<int> at_barrier, finished;
    while (true) {
      main_wake_.wait(lock, [this] { return running_ == 0; });
      if (!pending_.empty()) {
        std::vector<Request*> requests;
        requests.swap(pending_);
        if (!aborted_) {
          lock.unlock();
          std::exception_ptr error;
          try {
            serve(requests);
          } catch (...) {
            error = std::current_exception();
          }
          lock.lock();
          if (error) AbortLocked(error);
        }
        for (Request* r : requests) {
          if (aborted_) r->ok = false;
          Release(r->sample);
        }
        continue;
      }
      at_barrier.clear();
      finished.clear();
      for (int b = 0; b < n; ++b) {
        if (state_[b] == State::kWaitingIteration) at_barrier.push_back(b);
        if (state_[b] == State::kFinished && !reported_[b]) finished.push_back(b);
      }
      if (at_barrier.empty() && finished.empty()) break;  // every worker returned
      for (int b : at_barrier) decision_[b] = 0;
      if (!aborted_) {
        lock.unlock();
        std::exception_ptr error;
        try {
          observe(at_barrier, finished, &decision_);
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
        if (error) AbortLocked(error);
      }
      for (int b : finished) reported_[b] = 1;
      for (int b : at_barrier) Release(b);
    }
  }

  std::mutex mutex_;
  std::condition_variable main_wake_;
  std::vector<State> state_;
  std::vector<char> reported_;
  std::vector<char> decision_;
  std::unique_ptr<std::condition_variable[]> wake_;
  std::vector<Request*> pending_;
  int running_ = 0;
  bool aborted_ = false;
  std::exception_ptr error_;
};

// Ends every Ceres iteration of `sample` at the lockstep barrier; Ceres stops
// when the solver decides the sample is done.
class BarrierCallback final : public ceres::IterationCallback {
 public:
  BarrierCallback(Lockstep* lockstep, int sample) : lockstep_(lockstep), sample_(sample) {}
  ceres::CallbackReturnType operator()(const ceres::IterationSummary&) override {
    return lockstep_->EndIteration(sample_) ? ceres::SOLVER_CONTINUE
                                            : ceres::SOLVER_TERMINATE_SUCCESSFULLY;
  }

 private:
  Lockstep* lockstep_;
  int sample_;
};

// Status of a sample whose Ceres run ended before our tolerance was met.
inline TerminationType FromCeres(ceres::TerminationType type) {
  switch (type) {
    case ceres::CONVERGENCE: return TerminationType::kStalled;  // no further progress possible
    case ceres::NO_CONVERGENCE: return TerminationType::kMaxIterations;
    default: return TerminationType::kFailure;  // e.g. a failed line search
  }
}

// Appends to the summary how many samples Ceres ended before the tolerance,
// with the first one's Ceres message.
inline void NoteCeresStops(const std::vector<int>& stopped, const std::vector<std::string>& messages,
                           Summary* summary) {
  if (stopped.empty()) return;
  const int b = stopped.front();
  summary->message += "; " + std::to_string(stopped.size()) +
                      " samples ended by Ceres before the tolerance (first: sample " +
                      std::to_string(b) + ": " + messages[b] + ")";
}

}  // namespace internal
}  // namespace implicit
