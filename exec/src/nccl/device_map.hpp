// Moved to the public header (the CLI parses --device-map); kept for exec/src includes.
#pragma once

#include "pipewright/exec/device_map.hpp"
