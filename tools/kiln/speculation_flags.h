// kiln run's, kiln generate's and kiln bench spec's --spec, --spec-k and --spec-tree (their
// table is in cli_flags.cc) as the engine's SpeculationParams.
#pragma once

#include <string>
#include <vector>

#include "runtime/engine/engine.h"
#include "tools/kiln/cli_args.h"

namespace kiln {

// Off without --spec; --spec-k / --spec-tree without --spec, both at once,
// k <= 0 or a width <= 0 are errors naming the flag.
Result<SpeculationParams> speculationFrom(const CliArgs& args);

// The draft model of --spec=draft:PATH (a model or an artifact; openEngine
// compiles a model as it does the target), empty for other methods.
std::string draftModelFrom(const CliArgs& args);
// The draft head of --spec=head:PATH (a checkpoint directory), empty for
// other methods.
std::string draftHeadFrom(const CliArgs& args);

// The drafts' kind as reports name it: ngram, draft or layerskip:K.
std::string specMethodName(const SpeculationParams& spec);

// The kiln-compile flag that gives `model` a verify entry for `spec`'s tree;
// none when speculation is off or `model` is an artifact (compiled already:
// Engine::checkSpeculation says whether its verify entry holds the tree).
std::vector<std::string> speculationCompileFlags(const SpeculationParams& spec, const std::string& model);

}  // namespace kiln
