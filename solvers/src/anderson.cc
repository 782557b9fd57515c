// AndersonSolver compiled once for float and double (see "Compile once" in types.h).
#include <implicit/solvers/anderson.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(AndersonSolver);
}  // namespace implicit
