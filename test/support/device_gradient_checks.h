// The device IFT gradients against the CPU's (the device tests only; needs a
// CUDA build): for each device adjoint solver (fixed_point, anderson, gmres),
// cuda::ImplicitBackward at the device equilibrium z must converge and give
// the CPU backward pass's parameter gradient, input gradient (for maps with
// an input) and adjoint (when asked) to 1e-8 relative.
#pragma once

#include <implicit/diff/cuda_backward.h>
#include <implicit/diff/implicit_diff.h>

#include <boost/test/unit_test.hpp>

#include <string>

namespace implicit {
namespace testing {

inline void CheckDeviceGradients(cuda::Context& context, const cuda::DeviceMap<double>& map,
                                 const cuda::DeviceMatrix<double>& z, const cuda::DeviceMatrix<double>& grad,
                                 const BackwardResult<double>& expected, bool compare_adjoint) {
  for (const std::string linear : {"fixed_point", "anderson", "gmres"}) {
    BOOST_TEST_CONTEXT("adjoint solver " << linear) {
      BackwardOptions options;
      options.linear_solver = linear;
      options.tolerance = 1e-13;
      options.max_iterations = 2000;
      const auto g = cuda::ImplicitBackward(context, map, z, grad, options);
      BOOST_TEST(g.ok());
      if (compare_adjoint) {
        const Matrix<double> adjoint = g.adjoint.ToHost(context);
        BOOST_TEST((adjoint - expected.adjoint).norm() <= 1e-8 * expected.adjoint.norm());
      }
      const Matrix<double> dtheta = g.parameter_gradient.ToHost(context);
      BOOST_TEST((dtheta.col(0) - expected.parameter_gradient).norm() <= 1e-8 * expected.parameter_gradient.norm());
      BOOST_TEST(g.input_gradient.rows() == expected.input_gradient.rows());
      if (expected.input_gradient.size() > 0) {
        const Matrix<double> dc = g.input_gradient.ToHost(context);
        BOOST_TEST((dc - expected.input_gradient).norm() <= 1e-8 * expected.input_gradient.norm());
      }
    }
  }
}

}  // namespace testing
}  // namespace implicit
