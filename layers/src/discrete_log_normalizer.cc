// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/discrete_log_normalizer.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(DiscreteLogNormalizer);
}  // namespace implicit
