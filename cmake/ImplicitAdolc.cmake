# Reverse-mode derivatives of user energies through ADOL-C (optional).
# IMPLICIT_WITH_ADOLC defaults to ON when Debian's libadolc-dev is installed;
# without it AutoDiffEnergy keeps its forward mode only (AutoDiffMode::kReverse
# then throws, naming the missing library).
find_package(ADOLC QUIET)
set(IMPLICIT_ADOLC_DEFAULT OFF)
if(ADOLC_FOUND)
  set(IMPLICIT_ADOLC_DEFAULT ON)
endif()
option(IMPLICIT_WITH_ADOLC "Reverse-mode derivatives of user energies (ADOL-C)" ${IMPLICIT_ADOLC_DEFAULT})
if(IMPLICIT_WITH_ADOLC AND NOT ADOLC_FOUND)
  message(FATAL_ERROR "IMPLICIT_WITH_ADOLC=ON but ADOL-C was not found (apt-get install libadolc-dev)")
endif()
if(NOT IMPLICIT_WITH_ADOLC)
  message(STATUS "libimplicit: ADOL-C not used; user energies get forward-mode derivatives only")
endif()

# implicit_link_adolc(<target>): the compile definition and the library.
function(implicit_link_adolc target)
  if(IMPLICIT_WITH_ADOLC)
    target_compile_definitions(${target} PUBLIC IMPLICIT_HAVE_ADOLC=1)
    target_link_libraries(${target} PUBLIC ADOLC::adolc)
  endif()
endfunction()
