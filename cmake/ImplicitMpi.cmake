# The MPI backend of implicit::Communicator (issue 14). IMPLICIT_WITH_MPI
# defaults to ON when MPI is found (Debian: libopenmpi-dev, openmpi-bin). The
# target implicit_mpi (implicit::mpi) exists either way: without MPI it holds
# the stubs of lib/mpi/mpi_unavailable.cc (mpi::Available() says why).
find_package(MPI COMPONENTS CXX QUIET)
implicit_dependency_option(IMPLICIT_WITH_MPI "Build the MPI communicator (implicit::mpi)"
                           MPI_CXX_FOUND "MPI was not found (apt-get install libopenmpi-dev openmpi-bin)")
if(NOT IMPLICIT_WITH_MPI)
  message(STATUS "libimplicit: MPI not used; implicit::mpi reports that it is unavailable")
endif()

# implicit_add_mpi_backend(): the target implicit_mpi.
function(implicit_add_mpi_backend)
  if(IMPLICIT_WITH_MPI)
    add_library(implicit_mpi ${PROJECT_SOURCE_DIR}/lib/mpi/mpi_world.cc)
    target_link_libraries(implicit_mpi PUBLIC MPI::MPI_CXX)
  else()
    add_library(implicit_mpi ${PROJECT_SOURCE_DIR}/lib/mpi/mpi_unavailable.cc)
  endif()
  add_library(implicit::mpi ALIAS implicit_mpi)
  target_link_libraries(implicit_mpi PUBLIC implicit_core)
  set_target_properties(implicit_mpi PROPERTIES POSITION_INDEPENDENT_CODE ON EXPORT_NAME mpi)
  implicit_target_options(implicit_mpi)
endfunction()
