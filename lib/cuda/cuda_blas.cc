// cuBLAS loaded on first use (cuda_blas.h): the functions the backend calls,
// looked up by name in libcublas.so.<major> once.
#include <implicit/core/cuda_blas.h>

#include <dlfcn.h>

#include <string>

// The name a cublas_v2.h function is exported under (cublasCreate is a macro
// for cublasCreate_v2): the macro expanded, then quoted.
#define IMPLICIT_CUBLAS_QUOTE(name) #name
#define IMPLICIT_CUBLAS_SYMBOL(name) IMPLICIT_CUBLAS_QUOTE(name)
#define IMPLICIT_CUBLAS_MAJOR_TEXT(major) IMPLICIT_CUBLAS_QUOTE(major)

namespace implicit {
namespace cuda {
namespace internal {
namespace {

struct Cublas {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  decltype(&cublasDgemm) dgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_batched = nullptr;
  decltype(&cublasDgemmStridedBatched) dgemm_batched = nullptr;
};

// A literal: no constructor run at every program start.
constexpr char kSoname[] = "libcublas.so." IMPLICIT_CUBLAS_MAJOR_TEXT(CUBLAS_VER_MAJOR);

void* OpenLibrary() {
  void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  std::string error = handle == nullptr ? dlerror() : "";
#ifdef IMPLICIT_CUDA_LIBRARY_DIR
  if (handle == nullptr) {
    const std::string path = std::string(IMPLICIT_CUDA_LIBRARY_DIR) + "/" + kSoname;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) error += "; " + std::string(dlerror());
  }
#endif
  if (handle == nullptr) {
    throw std::runtime_error("cuBLAS could not be loaded (" + error +
                             "): put the CUDA toolkit's library folder on LD_LIBRARY_PATH");
  }
  return handle;
}

template <typename Function>
void Resolve(void* library, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(library, name));
  if (*function == nullptr) {
    throw std::runtime_error(std::string("cuBLAS: ") + kSoname + " has no function " + name);
  }
}

Cublas Load() {
  void* library = OpenLibrary();
  Cublas c;
  try {
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasCreate), &c.create);
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasDestroy), &c.destroy);
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasSetStream), &c.set_stream);
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasSetMathMode), &c.set_math_mode);
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasSgemm), &c.sgemm);
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasDgemm), &c.dgemm);
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasSgemmStridedBatched), &c.sgemm_batched);
    Resolve(library, IMPLICIT_CUBLAS_SYMBOL(cublasDgemmStridedBatched), &c.dgemm_batched);
  } catch (...) {
    dlclose(library);
    throw;
  }
  return c;  // the library stays loaded for the life of the process
}

// Loaded by the first call (a static initialised once, thread-safe; a load
// that throws is tried again by the next call).
const Cublas& Library() {
  static const Cublas cublas = Load();
  return cublas;
}

}  // namespace

void LoadCublas() { Library(); }

cublasHandle_t CreateHandle(cudaStream_t stream, bool allow_tf32) {
  const Cublas& cublas = Library();
  cublasHandle_t handle = nullptr;
  CheckBlas(cublas.create(&handle), "cublasCreate");
  try {
    CheckBlas(cublas.set_stream(handle, stream), "cublasSetStream");
    CheckBlas(cublas.set_math_mode(handle, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
              "cublasSetMathMode");
  } catch (...) {
    cublas.destroy(handle);
    throw;
  }
  return handle;
}

void DestroyHandle(cublasHandle_t handle) {
  if (handle != nullptr) Library().destroy(handle);
}

cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) {
  return Library().sgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    double alpha, const double* a, int lda, const double* b, int ldb, double beta, double* c,
                    int ldc) {
  return Library().dgemm(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}

cublasStatus_t GemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const float* a, int lda, long long sa, const float* b, int ldb,
                           long long sb, float beta, float* c, int ldc, long long sc, int count) {
  return Library().sgemm_batched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}
cublasStatus_t GemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           double alpha, const double* a, int lda, long long sa, const double* b, int ldb,
                           long long sb, double beta, double* c, int ldc, long long sc, int count) {
  return Library().dgemm_batched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
