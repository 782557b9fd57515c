# implicit_target_options(<target>): the project's warning, sanitizer, fuzzing
# and linker flags, applied per target (never globally).
function(implicit_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(IMPLICIT_GCC_FEWER_COLLECTIONS AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:--param=ggc-min-expand=400 --param=ggc-min-heapsize=4194304>)
  endif()
  if(IMPLICIT_USE_LLD)
    target_link_options(${target} PRIVATE -fuse-ld=lld)
  endif()
  if(IMPLICIT_SANITIZE OR IMPLICIT_FUZZ)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(IMPLICIT_FUZZ)
    # Coverage instrumentation for libFuzzer (test/fuzz); its main() is linked
    # into the harnesses only.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  endif()
endfunction()
