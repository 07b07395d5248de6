// Turns a MODEL argument into a compiled artifact directory: an artifact is
// used as is; a model (path or cache name) is compiled once with kiln-compile
// into $KILN_HOME/artifacts/<name>-<key>, keyed by the model file's identity,
// the compile options and the compiler binary, and reused after. kiln-compile
// writes into a temporary directory that is sealed (artifact_seal.h) and
// renamed into place; a cached artifact whose seal fails is reported,
// removed and compiled again. The cache is required: an unwritable one is
// an error that says how to get past it.
#pragma once

#include <string>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

struct CompileRequest {
  std::string model;                       // path or cache name
  std::vector<std::string> compile_flags;  // e.g. {"--page-size=16"}
  bool progress = true;
};

Result<std::string> artifactFor(const CompileRequest& request);

// Directory holding the running executable (for sibling tools).
std::string executableDir();

}  // namespace kiln
