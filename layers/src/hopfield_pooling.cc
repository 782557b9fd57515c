// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/hopfield_pooling.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldPooling);
}  // namespace implicit
