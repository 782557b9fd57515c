// The test problems of test_problems.h compiled once for float and double, for all the
// tests (see "Compile once" in implicit/core/types.h).
#include "support/test_problems.h"

namespace implicit {
namespace testing {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(AffineMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(TanhDeqMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(QuadraticEnergy);
template Matrix<float> RandomMatrixWithNorm<float>(Index, Index, double, unsigned);
template Matrix<double> RandomMatrixWithNorm<double>(Index, Index, double, unsigned);
template Matrix<float> RandomSpd<float>(Index, double, double, unsigned);
template Matrix<double> RandomSpd<double>(Index, double, double, unsigned);
}  // namespace testing
}  // namespace implicit
