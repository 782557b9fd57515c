// The linear solvers compiled once for float and double (see "Compile once"
// in types.h).
#include <implicit/solvers/linear_solvers.h>

namespace implicit {
IMPLICIT_INSTANTIATE_LINEAR_SOLVE(FixedPointLinearSolve);
IMPLICIT_INSTANTIATE_LINEAR_SOLVE(AndersonLinearSolve);
IMPLICIT_INSTANTIATE_LINEAR_SOLVE(BroydenLinearSolve);
IMPLICIT_INSTANTIATE_LINEAR_SOLVE(ConjugateGradientSolve);
IMPLICIT_INSTANTIATE_LINEAR_SOLVE(MinresSolve);
IMPLICIT_INSTANTIATE_LINEAR_SOLVE(GmresSolve);
IMPLICIT_INSTANTIATE_LINEAR_SOLVE(DirectLinearSolve);
IMPLICIT_SOLVE_LINEAR_SYSTEM_INSTANCE(, float);
IMPLICIT_SOLVE_LINEAR_SYSTEM_INSTANCE(, double);
}  // namespace implicit
