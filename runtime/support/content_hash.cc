#include "runtime/support/content_hash.h"

#include <fmt/format.h>

namespace kiln {

std::string Fnv1a64::hex() const { return fmt::format("{:016x}", state_); }

}  // namespace kiln
