// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/log_normalizer.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(DiscreteLogNormalizer);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(GaussianLogNormalizer);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(LogNormalizerEnergy);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ResidualLogNormalizerMap);
}  // namespace implicit
