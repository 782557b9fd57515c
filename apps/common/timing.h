// Timing for the programs' measurements (implicit-bench, implicit-et's step
// times): the median of a list, and the median wall time of repeated calls
// (robust to a call that another process slowed down).
//
//   double s = MedianSeconds([&] { map.Evaluate(x, out); }, 5);
//   double m = Median(step_seconds);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

namespace implicit_apps {

// The median of a non-empty list (the mean of the middle two for an even count).
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size();
  return m % 2 == 1 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

// The median of `repeat` (>= 1) timed calls, in seconds.
inline double MedianSeconds(const std::function<void()>& call, long repeat) {
  std::vector<double> t;
  for (long r = 0; r < std::max(1L, repeat); ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return Median(std::move(t));
}

}  // namespace implicit_apps
