# The library's layers point one way: core <- solvers <- diff <- layers.
# A file of one layer includes libimplicit headers of its own layer and of the
# layers below it only, so no include cycle exists between the layers or
# between the top-level folders lib/, solvers/ and layers/.
#   cmake -DROOT=<source dir> -P test/architecture/include_graph.cmake
# (run by ctest as architecture_include_graph). Prints every violation.
if(NOT ROOT)
  message(FATAL_ERROR "include_graph.cmake: pass -DROOT=<source dir>")
endif()
set(order core solvers diff layers)

# Layer of a file, from where it lives.
function(layer_of_file path out)
  if(path MATCHES "^${ROOT}/lib/")
    set(${out} core PARENT_SCOPE)
  elseif(path MATCHES "^${ROOT}/solvers/(include/implicit/diff|src/diff)/")
    set(${out} diff PARENT_SCOPE)
  elseif(path MATCHES "^${ROOT}/solvers/")
    set(${out} solvers PARENT_SCOPE)
  else()
    set(${out} layers PARENT_SCOPE)
  endif()
endfunction()

# Every source and header of the three folders, the CUDA ones (.cu, .cuh) too.
set(patterns)
foreach(folder lib solvers layers)
  foreach(extension h cc cu cuh)
    list(APPEND patterns ${ROOT}/${folder}/*.${extension})
  endforeach()
endforeach()
file(GLOB_RECURSE files ${patterns})
set(violations 0)
set(checked 0)
foreach(file ${files})
  layer_of_file(${file} layer)
  list(FIND order ${layer} level)
  file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]*<implicit/")
  foreach(line ${includes})
    string(REGEX REPLACE ".*<implicit/([a-z_]+)/.*" "\\1" target "${line}")
    list(FIND order ${target} target_level)
    math(EXPR checked "${checked} + 1")
    if(target_level EQUAL -1 OR target_level GREATER level)
      file(RELATIVE_PATH rel ${ROOT} ${file})
      message(SEND_ERROR "${rel} (layer ${layer}) includes <implicit/${target}/...>: "
                         "a layer may include only itself and the layers below it (${order})")
      math(EXPR violations "${violations} + 1")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "include_graph.cmake: no #include <implicit/...> found under ${ROOT}")
endif()
message(STATUS "include graph: ${checked} includes checked, ${violations} violations")
