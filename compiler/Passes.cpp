//===- Passes.cpp - registration of kiln's passes --------------------------===//

#include "compiler/Passes.h"

namespace kiln {

void registerKilnPasses() {}

}  // namespace kiln
