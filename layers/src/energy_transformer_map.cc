// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/energy_transformer_map.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(EnergyTransformerMap);
}  // namespace implicit
