// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/regularized_attention.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(SparseHopfieldEnergy);
}  // namespace implicit
