# kiln_add_fuzzer(NAME SOURCE file.cc CORPUS dir... LIBS lib...)
#
# One libFuzzer entry point (LLVMFuzzerTestOneInput in SOURCE) and its
# committed corpus directories: the seeds, plus the input of every fixed
# finding.
#   KILN_ENABLE_FUZZERS: bin/NAME, linked with libFuzzer; scripts/fuzz.sh runs
#     it, reading CORPUS from fuzz/NAME.corpus in the build directory.
#   KILN_ENABLE_TESTS: bin/NAME_replay, the same entry point under
#     test/fuzz/replay_main.cc (no libFuzzer needed), and the ctest
#     NAME_replay that runs every file of CORPUS through it once, so findings
#     stay fixed. Under KILN_SANITIZE the replay is sanitized too.
function(kiln_add_fuzzer name)
  cmake_parse_arguments(FUZZ "" "SOURCE" "CORPUS;LIBS" ${ARGN})
  if(NOT FUZZ_SOURCE OR NOT FUZZ_CORPUS)
    message(FATAL_ERROR "kiln_add_fuzzer(${name}): SOURCE and CORPUS are required")
  endif()
  set(corpus "")
  foreach(dir IN LISTS FUZZ_CORPUS)
    get_filename_component(dir ${dir} ABSOLUTE)
    list(APPEND corpus ${dir})
  endforeach()
  if(KILN_ENABLE_FUZZERS)
    add_executable(${name} ${FUZZ_SOURCE})
    target_link_libraries(${name} PRIVATE ${FUZZ_LIBS})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    list(JOIN corpus "\n" lines)
    file(WRITE ${CMAKE_BINARY_DIR}/fuzz/${name}.corpus "${lines}\n")
  endif()
  if(KILN_ENABLE_TESTS)
    add_executable(${name}_replay ${FUZZ_SOURCE} ${PROJECT_SOURCE_DIR}/test/fuzz/replay_main.cc)
    target_link_libraries(${name}_replay PRIVATE ${FUZZ_LIBS})
    add_test(NAME ${name}_replay COMMAND ${name}_replay ${corpus})
    set_tests_properties(${name}_replay PROPERTIES LABELS "fuzz-replay")
  endif()
endfunction()
