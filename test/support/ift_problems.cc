// The test problems of ift_problems.h compiled once for float and double, for all the
// tests (see "Compile once" in implicit/core/types.h).
#include "support/ift_problems.h"

namespace implicit {
namespace testing {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldEnergy);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(LinearDeqMap);
}  // namespace testing
}  // namespace implicit
