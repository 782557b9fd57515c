// The test problems of h2_solver_problems.h compiled once for float and double, for all the
// tests (see "Compile once" in implicit/core/types.h).
#include "support/h2_solver_problems.h"

namespace implicit {
namespace testing {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(LogCoshEnergy);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(SpyMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(NoJacobianMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(SpyEnergy);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(PoisonedMap);
}  // namespace testing
}  // namespace implicit
