# implicit_dependency_option(<option> <help> <found-variable> <what is missing>):
# an ON/OFF option for an optional dependency, ON by default when
# <found-variable> is true; turned ON without the dependency, configuring
# stops with "<option>=ON but <what is missing>". Used for OpenMP, CUDA and
# ADOL-C.
function(implicit_dependency_option option help found missing)
  set(_default OFF)
  if(${found})
    set(_default ON)
  endif()
  option(${option} "${help}" ${_default})
  if(${option} AND NOT ${found})
    message(FATAL_ERROR "${option}=ON but ${missing}")
  endif()
endfunction()
