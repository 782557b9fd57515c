// The test problems of solver_test_maps.h compiled once for float and double, for all the
// tests (see "Compile once" in implicit/core/types.h).
#include "support/solver_test_maps.h"

namespace implicit {
namespace testing {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(CosMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ScalarAffineMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(NoFixedPointMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(AtanMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(NanAfterMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ColumnRecorderMap);
}  // namespace testing
}  // namespace implicit
