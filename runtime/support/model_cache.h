// Where kiln keeps models and compiled artifacts: $KILN_HOME (default
// ~/.cache/kiln). A MODEL argument is a path (GGUF file, HF checkpoint
// directory, compiled artifact) or the name of a model in the cache.
#pragma once

#include "runtime/support/error.h"

#include <string>

namespace kiln {

// $KILN_HOME, or $HOME/.cache/kiln.
std::string kilnHome();

// A path that exists is returned as is. Otherwise `name` is looked up as
// $KILN_HOME/models/<name>/ holding one .gguf file or an HF checkpoint
// (config.json). The error lists the models the cache holds.
Result<std::string> resolveModel(const std::string& name_or_path);

}  // namespace kiln
