# Sanitizers for every C and C++ target of the build (never CUDA device code):
#   -DKILN_SANITIZE=address,undefined   (the `asan` preset, scripts/test-asan.sh)
# UndefinedBehaviorSanitizer findings abort the test that hits them
# (-fno-sanitize-recover), so ctest reports them as failures.
# KILN_ENABLE_FUZZERS implies address,undefined and adds libFuzzer's coverage
# instrumentation (clang only).
set(KILN_SANITIZE "" CACHE STRING
    "Comma-separated -fsanitize= list for every C/C++ target, e.g. address,undefined")

if(KILN_ENABLE_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KILN_ENABLE_FUZZERS needs clang (libFuzzer): configure with "
                        "CC=clang-19 CXX=clang++-19; got ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(NOT KILN_SANITIZE)
    set(KILN_SANITIZE address,undefined)
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
endif()

if(KILN_SANITIZE)
  message(STATUS "kiln: building with -fsanitize=${KILN_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${KILN_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fsanitize=${KILN_SANITIZE}>)
  if(KILN_SANITIZE MATCHES "undefined")
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>)
  endif()
endif()
