# Regenerates the tiny-llama manifest with kiln-compile and compares it with
# the committed fixture (test/fixtures/tiny-llama/artifact/manifest.json), so
# the executor's end-to-end test always runs the plan the compiler makes.
# Fields that depend on the checkout (model.source: an absolute path;
# model.source_mtime; model.source_files, whose mtimes are the files') are
# left out of the comparison.
#   cmake -DKILN_COMPILE=... -DMODEL=test/fixtures/tiny-llama -DEXPECTED=... -DOUT=...
#         [-DFLAGS="--quant-weights=int8"] -P this
foreach(var KILN_COMPILE MODEL EXPECTED OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_manifest_fixture: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${OUT}")
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
execute_process(COMMAND "${KILN_COMPILE}" "${MODEL}" -o "${OUT}" ${flags}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln-compile ${MODEL} -o ${OUT} failed (${rc}):\n${out}${err}")
endif()

function(normalized path result)
  file(READ "${path}" text)
  string(JSON text ERROR_VARIABLE error REMOVE "${text}" model source)
  string(JSON text ERROR_VARIABLE error REMOVE "${text}" model source_mtime)
  if(error)
    message(FATAL_ERROR "${path}: ${error}")
  endif()
  # Each weights file's mtime is the checkout's too (absent in older manifests).
  string(JSON text ERROR_VARIABLE absent REMOVE "${text}" model source_files)
  set(${result} "${text}" PARENT_SCOPE)
endfunction()

normalized("${EXPECTED}" expected)
normalized("${OUT}/manifest.json" actual)
if(NOT expected STREQUAL actual)
  message(FATAL_ERROR
    "The committed manifest ${EXPECTED} differs from what kiln-compile writes now "
    "(${OUT}/manifest.json). If the compiler change is intended, regenerate the fixture from "
    "the source root:\n  kiln-compile ${MODEL} -o test/fixtures/tiny-llama/artifact\n"
    "and check the CPU executor's end-to-end test still passes.")
endif()
message(STATUS "tiny-llama manifest fixture matches kiln-compile")
