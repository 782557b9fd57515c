// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/energy_transformer_token_norm.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(internal::EnergyTransformerTokenNorm);
}  // namespace implicit
