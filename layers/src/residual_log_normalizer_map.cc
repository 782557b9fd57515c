// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/residual_log_normalizer_map.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ResidualLogNormalizerMap);
}  // namespace implicit
