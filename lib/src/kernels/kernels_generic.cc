// The CPU kernels compiled for the generic level: the build's own flags (x86-64 baseline, SSE2, unless IMPLICIT_NATIVE or the user's flags say more; any CPU).
// See kernels.inc.
#define IMPLICIT_KERNEL_NAMESPACE kernels_generic
#define IMPLICIT_KERNEL_TABLE GenericKernels
#define Eigen implicit_kernels_generic_eigen
#include "kernels.inc"
