# The per-level CPU kernels (lib/src/kernels) may define no link-once (weak)
# symbol that another unit could also define: such a symbol is one function
# for the whole program, and the linker could keep the AVX-512 copy of it for
# code that runs on any CPU. So every weak symbol of a level's object must
# carry that level's own names (its namespace, or its renamed Eigen).
#   cmake -DNM=<nm> -DOBJECTS=<a.o;b.o;...> -P test/architecture/kernel_symbols.cmake
# (run by ctest as architecture_kernel_symbols). Prints every offender.
if(NOT NM OR NOT OBJECTS)
  message(FATAL_ERROR "kernel_symbols.cmake: pass -DNM=<nm> -DOBJECTS=<objects>")
endif()
set(offenders 0)
set(checked 0)
foreach(object ${OBJECTS})
  execute_process(COMMAND ${NM} --defined-only ${object} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${object}")
  endif()
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line ${lines})
    # "<address> <type> <name>": weak symbols are V, v, W, w, u (unique global).
    if(NOT line MATCHES "^[0-9a-fA-F]* ([VvWwu]) (.*)$")
      continue()
    endif()
    set(name ${CMAKE_MATCH_2})
    math(EXPR checked "${checked} + 1")
    # Mangled names contain the level's namespace (kernels_<level>) or its
    # renamed Eigen (implicit_kernels_<level>_eigen). Allowed besides, as the
    # same whatever the level: the personality routine's reference and type
    # information (_ZTI, _ZTS: data, no instructions; UBSan emits it for
    # function types), and the two functions Clang keeps out of line in the
    # sanitizer build even optimised -- std::bad_alloc's constructor (Eigen
    # throws it) and __clang_call_terminate -- which store a pointer or make
    # two calls: no arithmetic a level could compile differently.
    if(name MATCHES "kernels_(generic|x86_64_v3|x86_64_v4)" OR name STREQUAL "DW.ref.__gxx_personality_v0"
       OR name MATCHES "^_ZT[IS]" OR name MATCHES "^_ZNSt9bad_allocC[12]Ev$"
       OR name STREQUAL "__clang_call_terminate")
      continue()
    endif()
    message(SEND_ERROR "${object}: link-once symbol outside the level's own names: ${name}")
    math(EXPR offenders "${offenders} + 1")
  endforeach()
endforeach()
if(offenders GREATER 0)
  message(FATAL_ERROR "${offenders} shared link-once symbol(s) in the CPU kernel objects (see kernels.inc)")
endif()
message(STATUS "kernel objects: ${checked} link-once symbols, all under their level's names")
