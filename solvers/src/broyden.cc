// BroydenSolver compiled once for float and double (see "Compile once" in types.h).
#include <implicit/solvers/broyden.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(BroydenSolver);
}  // namespace implicit
