// Threads inside one app process: `--threads T` runs T independent pieces of
// work side by side (implicit-et: shares of a batch; implicit-graph: (seed,
// detector) runs). While they run, Eigen's own OpenMP threads are off, so
// that T threads use the cores instead of T teams oversubscribing them.
//
//   RunOnThreads(T, [&](long t) { ...piece t... });   // t = 0 on the caller
#pragma once

#include <Eigen/Core>

#include <exception>
#include <thread>
#include <vector>

namespace implicit_apps {

// Eigen::setNbThreads(1) for its lifetime when `on` (Eigen's products then run
// on the calling thread only; without OpenMP they always do), restored after.
class SerialEigen {
 public:
  explicit SerialEigen(bool on) : on_(on), saved_(Eigen::nbThreads()) {
    if (on_) Eigen::setNbThreads(1);
  }
  ~SerialEigen() {
    if (on_) Eigen::setNbThreads(saved_);
  }
  SerialEigen(const SerialEigen&) = delete;
  SerialEigen& operator=(const SerialEigen&) = delete;

 private:
  bool on_;
  int saved_;
};

// Calls work(t) for t = 0 .. count - 1, each on its own thread (t = 0 on the
// calling one), with Eigen serial when count > 1. Once all have finished, the
// exception of the lowest t that threw (if any) is rethrown.
template <typename Work>
void RunOnThreads(long count, Work&& work) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(count > 0 ? count : 0));
  auto piece = [&](long t) {
    try {
      work(t);
    } catch (...) {
      errors[static_cast<std::size_t>(t)] = std::current_exception();
    }
  };
  {
    const SerialEigen serial(count > 1);
    std::vector<std::thread> threads;
    for (long t = 1; t < count; ++t) threads.emplace_back(piece, t);
    if (count > 0) piece(0);
    for (std::thread& t : threads) t.join();
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace implicit_apps
