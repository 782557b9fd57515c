# FindADOLC: ADOL-C (Debian: libadolc-dev), the taped reverse-mode automatic
# differentiation that AutoDiffEnergy uses for large states
# (lib/include/implicit/core/reverse_tape.h). Defines ADOLC_FOUND and the
# imported target ADOLC::adolc.
find_path(ADOLC_INCLUDE_DIR adolc/adolc.h)
find_library(ADOLC_LIBRARY adolc)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ADOLC REQUIRED_VARS ADOLC_LIBRARY ADOLC_INCLUDE_DIR)
if(ADOLC_FOUND AND NOT TARGET ADOLC::adolc)
  add_library(ADOLC::adolc UNKNOWN IMPORTED)
  set_target_properties(ADOLC::adolc PROPERTIES
    IMPORTED_LOCATION "${ADOLC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ADOLC_INCLUDE_DIR}")
endif()
mark_as_advanced(ADOLC_INCLUDE_DIR ADOLC_LIBRARY)
