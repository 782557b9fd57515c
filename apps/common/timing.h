// Timing for the programs' measurements (implicit-bench, implicit-et's step
// times): the median of a list, and the median wall time of repeated calls
// (robust to a call that another process slowed down), of one call or of
// several in interleaved rounds.
//
//   double s = MedianSeconds([&] { map.Evaluate(x, out); }, 5);
//   std::vector<double> both = InterleavedMedianSeconds({value, gradient}, 5);
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

// The medians of `rounds` (>= 1) timed calls of each of `calls`, in seconds,
// taken in interleaved rounds (each round one call of each, in order): ratios
// of these medians compare the calls under the same load of a shared machine,
// where timing one call `rounds` times and then the next let a slower minute
// fall on one of them.
inline std::vector<double> InterleavedMedianSeconds(const std::vector<std::function<void()>>& calls,
                                                    long rounds) {
  std::vector<std::vector<double>> t(calls.size());
  for (long r = 0; r < std::max(1L, rounds); ++r) {
    for (std::size_t k = 0; k < calls.size(); ++k) {
      const auto start = std::chrono::steady_clock::now();
      calls[k]();
      t[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& times : t) medians.push_back(Median(std::move(times)));
  return medians;
}

// The median of `repeat` (>= 1) timed calls, in seconds.
inline double MedianSeconds(const std::function<void()>& call, long repeat) {
  return InterleavedMedianSeconds({call}, repeat)[0];
}

}  // namespace implicit_apps
