// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/hopfield_lookup.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldLookup);
}  // namespace implicit
