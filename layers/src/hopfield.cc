// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/hopfield.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ModernHopfieldEnergy);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldLayerEnergy);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldLayer);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldPooling);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldLookup);
}  // namespace implicit
