// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/core/energy_maps.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(GradientStepMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(CccpMap);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(EnergyRootMap);
}  // namespace implicit
