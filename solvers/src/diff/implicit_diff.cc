// The backward pass compiled once for float and double (see "Compile once" in
// types.h).
#include <implicit/diff/implicit_diff.h>

namespace implicit {
IMPLICIT_BACKWARD_INSTANCES(, float);
IMPLICIT_BACKWARD_INSTANCES(, double);
}  // namespace implicit
