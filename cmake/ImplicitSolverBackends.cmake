# The solver backends (issue 50): SUNDIALS KINSOL (implicit::kinsol) and PETSc
# SNES (implicit::petsc), each registering its solvers by name next to
# libimplicit's (solvers/include/implicit/solvers/kinsol.h, petsc.h).
# IMPLICIT_WITH_KINSOL / IMPLICIT_WITH_PETSC default to ON when the library is
# found (Debian: libsundials-dev, which brings petsc-dev). The targets exist
# either way: without the library they hold the stubs of
# solvers/<backend>/<backend>_unavailable.cc (Available() says why).
find_package(SUNDIALS CONFIG QUIET)
set(IMPLICIT_KINSOL_FOUND OFF)
if(TARGET SUNDIALS::kinsol AND TARGET SUNDIALS::nvecserial)
  set(IMPLICIT_KINSOL_FOUND ON)
endif()
implicit_dependency_option(IMPLICIT_WITH_KINSOL "Build the SUNDIALS KINSOL solver backend (implicit::kinsol)"
                           IMPLICIT_KINSOL_FOUND "SUNDIALS KINSOL was not found (apt-get install libsundials-dev)")
find_package(PkgConfig QUIET)
find_package(MPI COMPONENTS CXX QUIET)  # Debian's PETSc is built on Open MPI; its headers include mpi.h
set(IMPLICIT_PETSC_FOUND OFF)
if(PkgConfig_FOUND AND MPI_CXX_FOUND)
  pkg_check_modules(PETSC QUIET IMPORTED_TARGET PETSc)
  if(PETSC_FOUND)
    set(IMPLICIT_PETSC_FOUND ON)
  endif()
endif()
implicit_dependency_option(IMPLICIT_WITH_PETSC "Build the PETSc SNES solver backend (implicit::petsc)"
                           IMPLICIT_PETSC_FOUND "PETSc (pkg-config PETSc) or MPI was not found (apt-get install petsc-dev)")
foreach(_backend KINSOL PETSC)
  if(NOT IMPLICIT_WITH_${_backend})
    string(TOLOWER ${_backend} _name)
    message(STATUS "libimplicit: ${_backend} not used; implicit::${_name} reports that it is unavailable")
  endif()
endforeach()

# implicit_add_solver_backend(<name> <found> <libraries...>): the target
# implicit_<name> (implicit::<name>) from solvers/<name>/<name>_solvers.cc
# linking <libraries> when <found>, else from <name>_unavailable.cc.
function(implicit_add_solver_backend name found)
  set(dir ${PROJECT_SOURCE_DIR}/solvers/${name})
  if(${found})
    add_library(implicit_${name} ${dir}/${name}_solvers.cc)
    target_link_libraries(implicit_${name} PRIVATE ${ARGN})
  else()
    add_library(implicit_${name} ${dir}/${name}_unavailable.cc)
  endif()
  add_library(implicit::${name} ALIAS implicit_${name})
  target_link_libraries(implicit_${name} PUBLIC implicit_solvers)
  set_target_properties(implicit_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON EXPORT_NAME ${name})
  implicit_target_options(implicit_${name})
endfunction()
