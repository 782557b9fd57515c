// Boost.Test precondition of the GPU tests: the case runs only when a CUDA
// device is usable, and is otherwise reported as skipped (never as passed),
// with the reason printed.
#pragma once

#include <implicit/core/cuda.h>

#include <boost/test/unit_test.hpp>

#include <iostream>
#include <string>

namespace implicit {
namespace testing {

struct GpuPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    std::string reason;
    const bool ok = implicit::cuda::Available(&reason);
    if (!ok) std::cout << "SKIPPED: GPU tests need a CUDA device: " << reason << std::endl;
    boost::test_tools::assertion_result result(ok);
    result.message() << reason;
    return result;
  }
};

}  // namespace testing
}  // namespace implicit
