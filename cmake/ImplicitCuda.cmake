# CUDA detection. IMPLICIT_WITH_CUDA defaults to ON when a CUDA compiler is
# found (nvcc on PATH or at /usr/local/cuda/bin/nvcc). A build without CUDA is
# fully functional; the GPU backend only adds the implicit_cuda target.
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
check_language(CUDA)
implicit_dependency_option(IMPLICIT_WITH_CUDA "Build the CUDA backend (needs nvcc; no GPU needed to build)"
                           CMAKE_CUDA_COMPILER "no CUDA compiler was found")

if(IMPLICIT_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)   # Hopper (H100/H200); override as needed
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "libimplicit: CUDA backend ON (${CMAKE_CUDA_COMPILER}, arch ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "libimplicit: CUDA backend OFF")
endif()

# implicit_add_cuda_backend(): the target implicit_cuda (implicit::cuda) when
# the backend is on: each layer's kernels (*.cu, nvcc) and the host code that
# drives them (*.cc, g++): lib/cuda (core: context, device maps, their
# kernels), solvers/src/cuda (device solvers, their kernels and the fused
# Picard loops), solvers/src/diff/cuda (device backward pass, the GMRES
# kernels), layers/src/cuda (the Energy Transformer), with cuBLAS. Off: only
# the stubs of lib/cuda/cuda_unavailable.cc, which report why no GPU can be used.
function(implicit_add_cuda_backend)
  if(IMPLICIT_WITH_CUDA)
    file(GLOB _cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/lib/cuda/*.cu ${PROJECT_SOURCE_DIR}/lib/cuda/*.cc
         ${PROJECT_SOURCE_DIR}/solvers/src/cuda/*.cu
         ${PROJECT_SOURCE_DIR}/solvers/src/cuda/*.cc ${PROJECT_SOURCE_DIR}/solvers/src/diff/cuda/*.cc
         ${PROJECT_SOURCE_DIR}/solvers/src/diff/cuda/*.cu
         ${PROJECT_SOURCE_DIR}/layers/src/cuda/*.cc ${PROJECT_SOURCE_DIR}/layers/src/cuda/*.cu)
    list(REMOVE_ITEM _cuda_sources ${PROJECT_SOURCE_DIR}/lib/cuda/cuda_unavailable.cc)
  else()
    set(_cuda_sources ${PROJECT_SOURCE_DIR}/lib/cuda/cuda_unavailable.cc)
  endif()
  add_library(implicit_cuda ${_cuda_sources})
  add_library(implicit::cuda ALIAS implicit_cuda)
  target_link_libraries(implicit_cuda PUBLIC implicit_core)
  if(IMPLICIT_WITH_CUDA)
    target_link_libraries(implicit_cuda PUBLIC implicit_layers)
  endif()
  set_target_properties(implicit_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON EXPORT_NAME cuda)
  implicit_target_options(implicit_cuda)
  if(NOT IMPLICIT_WITH_CUDA)
    return()
  endif()
  # cuBLAS is opened on first use (lib/cuda/cuda_blas.cc), not linked: its
  # start-up work (about 0.1 s per process) is paid only by programs that use
  # the GPU. The toolkit's library folder is where it is looked for when the
  # dynamic loader does not find it.
  target_link_libraries(implicit_cuda PUBLIC CUDA::cudart PRIVATE ${CMAKE_DL_LIBS})
  target_compile_definitions(implicit_cuda PRIVATE IMPLICIT_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_compile_definitions(implicit_cuda PUBLIC IMPLICIT_WITH_CUDA=1)
  # Eigen's headers (seen through the Map interface) need relaxed constexpr.
  target_compile_options(implicit_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  set_target_properties(implicit_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()
