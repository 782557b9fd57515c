// The CPU kernels compiled for x86-64-v3 (AVX2, FMA; -march=x86-64-v3).
// See kernels.inc.
#define IMPLICIT_KERNEL_NAMESPACE kernels_x86_64_v3
#define IMPLICIT_KERNEL_TABLE X86_64_V3Kernels
#define Eigen implicit_kernels_x86_64_v3_eigen
#include "kernels.inc"
