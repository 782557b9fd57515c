// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/layer_norm.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ColumnLayerNorm);
}  // namespace implicit
