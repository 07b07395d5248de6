// Where a kiln binary finds the files it ships with: the CUDA kernel
// templates (codegen/kernels/*.cuh, compiled by NVRTC at run time) and the
// helper scripts kiln bench runs (scripts/hf_bench.py, llamacpp_bench.py).
// They sit in <dir of the executable>/../share/kiln/{kernels,scripts}: the
// build copies them into <build>/share/kiln and `cmake --install` into
// <prefix>/share/kiln, so no path of the build machine is compiled in and a
// build folder copied to another root runs unchanged.
#pragma once

#include <filesystem>
#include <string_view>

#include "runtime/support/error.h"

namespace kiln {

// The running program's own path (/proc/self/exe, links resolved).
std::filesystem::path executablePath();

// <dir of the executable>/../share/kiln.
std::filesystem::path dataDir();

// The kernel templates: $KILN_KERNELS_DIR when set, else dataDir()/kernels.
std::filesystem::path kernelTemplatesDir();

// dataDir()/scripts/NAME, or an error naming where it looked.
Result<std::filesystem::path> helperScript(std::string_view name);

}  // namespace kiln
