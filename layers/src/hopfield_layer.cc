// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/hopfield_layer.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(HopfieldLayer);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(LearnedInputHopfieldLayer);
}  // namespace implicit
