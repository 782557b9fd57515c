// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/deq_layer.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(MlpBlockMap);
}  // namespace implicit
