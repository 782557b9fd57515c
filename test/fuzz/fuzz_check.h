// What every fuzz harness shares: a property that must hold for an input the
// code under test accepted. A violated property aborts the process, which
// libFuzzer reports as a crash and saves the input (see test/fuzz/README.md).
//
//   implicit_fuzz::Check(dataset.labels.size() == n, "one label per image");
#pragma once

#include <cstdio>
#include <cstdlib>

namespace implicit_fuzz {

inline void Check(bool ok, const char* property) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", property);
    std::abort();
  }
}

}  // namespace implicit_fuzz
