// The CPU kernels compiled for x86-64-v4 (AVX-512 F/BW/CD/DQ/VL; -march=x86-64-v4).
// See kernels.inc.
#define IMPLICIT_KERNEL_NAMESPACE kernels_x86_64_v4
#define IMPLICIT_KERNEL_TABLE X86_64_V4Kernels
#define Eigen implicit_kernels_x86_64_v4_eigen
#include "kernels.inc"
