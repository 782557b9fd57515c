// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/mlp_block_map.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(MlpBlockMap);
}  // namespace implicit
