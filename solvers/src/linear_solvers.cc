// The linear solvers compiled once for float and double (see "Compile once"
// in types.h).
#include <implicit/solvers/linear_solvers.h>

namespace implicit {
IMPLICIT_LINEAR_SOLVES(, float);
IMPLICIT_LINEAR_SOLVES(, double);
}  // namespace implicit
