# Fast builds when the tools are present: ccache for every compile, lld for links.
find_program(KILN_CCACHE ccache)
if(KILN_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${KILN_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${KILN_CCACHE})
endif()

find_program(KILN_LLD NAMES ld.lld ld.lld-14 ld.lld-19)
if(KILN_LLD)
  add_link_options(-fuse-ld=lld)
endif()

add_compile_options(-Wall -Wextra -Wno-unused-parameter)
# GCC notes that passing 128-byte-aligned structs (TMA tensor maps in kernel
# params) changed ABI in GCC 4.6: nothing here crosses that boundary.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-psabi)
endif()
