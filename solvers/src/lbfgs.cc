// LbfgsSolver compiled once for float and double (see "Compile once" in types.h).
#include <implicit/solvers/lbfgs.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(LbfgsSolver);
}  // namespace implicit
