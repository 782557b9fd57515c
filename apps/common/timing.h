// Timing for implicit-bench's measurements: the median wall time of repeated
// calls (robust to a call that another process slowed down).
//
//   double s = MedianSeconds([&] { map.Evaluate(x, out); }, 5);
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace implicit_apps {

// The median of `repeat` (>= 1) timed calls, in seconds.
inline double MedianSeconds(const std::function<void()>& call, long repeat) {
  std::vector<double> t;
  for (long r = 0; r < std::max(1L, repeat); ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace implicit_apps
