# Reverse-mode derivatives of user energies through ADOL-C (optional).
# IMPLICIT_WITH_ADOLC defaults to ON when Debian's libadolc-dev is installed;
# without it AutoDiffEnergy keeps its forward mode only (AutoDiffMode::kReverse
# then throws, naming the missing library).
find_package(ADOLC QUIET)
implicit_dependency_option(IMPLICIT_WITH_ADOLC "Reverse-mode derivatives of user energies (ADOL-C)"
                           ADOLC_FOUND "ADOL-C was not found (apt-get install libadolc-dev)")
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
