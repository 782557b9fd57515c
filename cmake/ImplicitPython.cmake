# The Python module (python/, issue 13). IMPLICIT_PYTHON defaults to ON when a
# Python 3 interpreter with its headers, pybind11 and numpy (for that
# interpreter) are found; Debian: python3-dev, pybind11-dev, python3-numpy.
# Choose the interpreter with -DPython_EXECUTABLE=... (scripts/ pass Debian's
# /usr/bin/python3, the one Debian's python3-numpy and python3-pytest serve).
find_package(Python 3 COMPONENTS Interpreter Development.Module QUIET)
set(_implicit_python_missing "")
if(NOT Python_FOUND)
  set(_implicit_python_missing "no Python 3 interpreter with its headers was found (apt-get install python3-dev)")
else()
  find_package(pybind11 2.6 CONFIG QUIET)
  execute_process(COMMAND ${Python_EXECUTABLE} -c "import numpy"
                  RESULT_VARIABLE _implicit_numpy OUTPUT_QUIET ERROR_QUIET)
  if(NOT pybind11_FOUND)
    set(_implicit_python_missing "pybind11 was not found (apt-get install pybind11-dev)")
  elseif(NOT _implicit_numpy EQUAL 0)
    set(_implicit_python_missing
        "${Python_EXECUTABLE} cannot import numpy (apt-get install python3-numpy, or choose the interpreter with -DPython_EXECUTABLE=...)")
  endif()
endif()
set(IMPLICIT_PYTHON_FOUND OFF)
if(_implicit_python_missing STREQUAL "")
  set(IMPLICIT_PYTHON_FOUND ON)
endif()
implicit_dependency_option(IMPLICIT_PYTHON "Build the Python module 'implicit' (pybind11)"
                           IMPLICIT_PYTHON_FOUND "${_implicit_python_missing}")
if(NOT IMPLICIT_PYTHON)
  if(NOT _implicit_python_missing STREQUAL "")
    message(STATUS "libimplicit: Python module not built: ${_implicit_python_missing}")
  else()
    message(STATUS "libimplicit: Python module not built (IMPLICIT_PYTHON=OFF)")
  endif()
endif()
