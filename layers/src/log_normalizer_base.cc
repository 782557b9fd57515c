// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/log_normalizer_base.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(LogNormalizerBase);
}  // namespace implicit
