// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/rbm.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(RbmEnergy);
}  // namespace implicit
