# Finds MLIR 19 and sets up TableGen. Included only by the top level before the
# compiler subdirectories; the runtime never includes this file.
if(NOT MLIR_DIR)
  set(MLIR_DIR /usr/lib/llvm-19/lib/cmake/mlir)
endif()
find_package(MLIR REQUIRED CONFIG)
message(STATUS "kiln: MLIR ${LLVM_PACKAGE_VERSION} from ${MLIR_DIR}")

list(APPEND CMAKE_MODULE_PATH ${MLIR_CMAKE_DIR} ${LLVM_CMAKE_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})

# Every compiler library links the one shared libMLIR; static component
# libraries would be mixed with it otherwise (see TOOLCHAIN.md).
set(KILN_MLIR_LIBS MLIR LLVM)

# kiln_mlir_library(NAME SRCS... DEPENDS tablegen-targets LINK libs)
function(kiln_mlir_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPENDS;LINK" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_link_libraries(${name} PUBLIC ${KILN_MLIR_LIBS} ${ARG_LINK})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  if(ARG_DEPENDS)
    add_dependencies(${name} ${ARG_DEPENDS})
  endif()
  # LLVM's headers are built without exceptions; match it so compiler code
  # stays exception-free (errors travel as diagnostics and LogicalResult).
  target_compile_options(${name} PRIVATE -fno-exceptions)
endfunction()
