// GradientFlowSolver compiled once for float and double (see "Compile once" in types.h).
#include <implicit/solvers/gradient_flow.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(GradientFlowSolver);
}  // namespace implicit
