// Derivative checks shared by the layer tests: a closed-form energy (or map)
// against an automatic reference and against central finite differences.
//
//   CheckEnergyAgainstReference(closed, autodiff, x, tol)   values, gradients,
//       Hessian-vector and parameter vector-Jacobian products agree
//   CheckEnergyFiniteDifferences(energy, x, tol)            the same products
//       agree with central differences of Value / Gradient (double)
//   CheckMapFiniteDifferences(map, z, tol)                  JVP, VJP, parameter
//       and input VJPs of a FixedPointMap against central differences
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/map.h>

#include <boost/test/unit_test.hpp>

#include "support/test_problems.h"

#include <functional>
#include <string>

namespace implicit {
namespace testing {

inline double RelativeError(const Matrix<double>& a, const Matrix<double>& b) {
  return (a - b).norm() / (1.0 + b.norm());
}

// The closed-form energy and a reference (AutoDiffEnergy of the same energy,
// with the same parameter layout and values) agree on x.
void CheckEnergyAgainstReference(Energy<double>& closed, Energy<double>& reference,
                                 const Matrix<double>& x, double tol,
                                 const std::string& what = "");

// Gradient = d Value, HVP = d Gradient, parameter VJP = d/dtheta <Gradient, u>
// by central differences with step h.
void CheckEnergyFiniteDifferences(Energy<double>& energy, const Matrix<double>& x,
                                  double tol, const std::string& what = "",
                                  double h = 1e-5);

// JVP = d Evaluate along v, VJP = transpose of JVP, parameter VJP by central
// differences in theta; input VJP by central differences in the input when
// `set_input` is given (it installs an input matrix into the map).
void CheckMapFiniteDifferences(
    FixedPointMap<double>& map, const Matrix<double>& z, double tol, const std::string& what,
    ParameterSet<double>* params = nullptr,
    const std::function<void(const Matrix<double>&)>& set_input = nullptr,
    const Matrix<double>& input = Matrix<double>(), double h = 1e-5);

}  // namespace testing
}  // namespace implicit
