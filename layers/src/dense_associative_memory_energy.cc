// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/dense_associative_memory_energy.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(DenseAssociativeMemoryEnergy);
}  // namespace implicit
