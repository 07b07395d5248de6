//===- Passes.cpp - registration of kiln's passes and pipelines ------------===//

#include "compiler/Passes.h"
#include "compiler/Pipelines.h"

namespace kiln {
namespace {
#define GEN_PASS_REGISTRATION
#include "compiler/Passes.h.inc"
}  // namespace

void registerKilnPasses() {
  registerXfmrPasses();
  registerPipelines();
}

}  // namespace kiln
