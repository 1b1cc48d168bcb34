#include "pipewright/graph/version.hpp"

namespace pipewright {
const char* version() noexcept { return PIPEWRIGHT_VERSION; }
}  // namespace pipewright
