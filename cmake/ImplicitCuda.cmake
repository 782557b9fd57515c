# CUDA detection. IMPLICIT_WITH_CUDA defaults to ON when a CUDA compiler is
# found (nvcc on PATH or at /usr/local/cuda/bin/nvcc). A build without CUDA is
# fully functional; the GPU backend only adds the implicit_cuda target.
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
check_language(CUDA)
set(_implicit_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(_implicit_cuda_default ON)
endif()
option(IMPLICIT_WITH_CUDA "Build the CUDA backend (needs nvcc; no GPU needed to build)"
       ${_implicit_cuda_default})

if(IMPLICIT_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "IMPLICIT_WITH_CUDA=ON but no CUDA compiler was found")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)   # Hopper (H100/H200); override as needed
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "libimplicit: CUDA backend ON (${CMAKE_CUDA_COMPILER}, arch ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "libimplicit: CUDA backend OFF")
endif()

# implicit_add_cuda_backend(<target>): compiles lib/cuda/*.cu into <target>
# and links cuBLAS when the backend is on.
function(implicit_add_cuda_backend target)
  if(NOT IMPLICIT_WITH_CUDA)
    return()
  endif()
  file(GLOB _cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/lib/cuda/*.cu)
  if(NOT _cuda_sources)
    return()
  endif()
  target_sources(${target} PRIVATE ${_cuda_sources})
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublas)
  target_compile_definitions(${target} PUBLIC IMPLICIT_WITH_CUDA=1)
  # Eigen's headers (seen through the Map interface) need relaxed constexpr.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()
