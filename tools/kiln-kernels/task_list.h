// kiln-kernels ARTIFACT tasks: the megakernel's task graph of each entry
// that has one (runtime/artifact/megakernel.h), in the order the SMs take
// the tasks, then a summary.
#pragma once

#include <string>

namespace kiln {

// Prints the task list to stdout; 0, or 1 after an error on stderr.
int printTaskList(const std::string& artifact);

}  // namespace kiln
