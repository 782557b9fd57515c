# The `docs` target: the API reference, Doxygen over the public headers
# (docs/Doxyfile), written to <build>/docs/api/html. Any Doxygen warning (an
# undocumented public class, function or member, a malformed command) fails
# the target; scripts/test.sh builds it in CI. Not part of `all`.
find_program(IMPLICIT_DOXYGEN doxygen)
if(IMPLICIT_DOXYGEN)
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/docs/api
    COMMAND ${CMAKE_COMMAND} -E env IMPLICIT_DOCS_OUT=${CMAKE_BINARY_DIR}/docs/api
            ${IMPLICIT_DOXYGEN} ${CMAKE_CURRENT_SOURCE_DIR}/docs/Doxyfile
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
    COMMENT "API reference (Doxygen): ${CMAKE_BINARY_DIR}/docs/api/html/index.html"
    VERBATIM)
else()
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E echo "docs: doxygen not found (Debian package doxygen; scripts/install-deps.sh installs it)"
    COMMAND ${CMAKE_COMMAND} -E false
    VERBATIM)
endif()
