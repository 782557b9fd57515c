// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/modern_hopfield_energy.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ModernHopfieldEnergy);
}  // namespace implicit
