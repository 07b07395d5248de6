# The files kiln's binaries find beside themselves at run time
# (runtime/support/data_dir.h): the CUDA kernel templates NVRTC compiles and
# the helper scripts kiln bench runs and the prompts kiln bench spec reads. Copied into <build>/share/kiln before
# anything that reads them is built (kiln_data_dir depends on kiln_data) and
# installed into <prefix>/share/kiln, so no binary records a source path.
file(GLOB kiln_kernel_templates CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/codegen/kernels/*.cuh)
set(kiln_helper_scripts ${CMAKE_SOURCE_DIR}/scripts/hf_bench.py ${CMAKE_SOURCE_DIR}/scripts/hf_serve_bench.py
                        ${CMAKE_SOURCE_DIR}/scripts/llamacpp_bench.py)
set(kiln_bench_data ${CMAKE_SOURCE_DIR}/tools/kiln/spec_prompts.jsonl)
set(KILN_DATA_DIR ${CMAKE_BINARY_DIR}/share/kiln)

set(kiln_data_outputs)
foreach(group IN ITEMS kernels scripts bench)
  if(group STREQUAL "kernels")
    set(sources ${kiln_kernel_templates})
  elseif(group STREQUAL "bench")
    set(sources ${kiln_bench_data})
  else()
    set(sources ${kiln_helper_scripts})
  endif()
  set(outputs)
  foreach(source IN LISTS sources)
    get_filename_component(name ${source} NAME)
    list(APPEND outputs ${KILN_DATA_DIR}/${group}/${name})
  endforeach()
  add_custom_command(OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${KILN_DATA_DIR}/${group}
    COMMAND ${CMAKE_COMMAND} -E copy ${sources} ${KILN_DATA_DIR}/${group}/
    DEPENDS ${sources}
    COMMENT "Copying kiln's ${group} into share/kiln/${group}"
    VERBATIM)
  list(APPEND kiln_data_outputs ${outputs})
endforeach()
add_custom_target(kiln_data ALL DEPENDS ${kiln_data_outputs})

install(DIRECTORY ${KILN_DATA_DIR} DESTINATION share)
