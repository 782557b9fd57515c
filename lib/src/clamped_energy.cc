// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/core/clamped_energy.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ClampedEnergy);
}  // namespace implicit
