// PicardSolver compiled once for float and double (see "Compile once" in types.h).
#include <implicit/solvers/picard.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(PicardSolver);
}  // namespace implicit
