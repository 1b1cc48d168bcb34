// Whole-file reads for exec/'s data and weight files (npy, safetensors, checkpoints).
//
// Writes go through the one writer of every pipewright output, pipewright::write_file_atomically
// (pipewright/graph/file_io.hpp, Note [Output files]), included here for exec's writers.
#pragma once

#include <string>
#include <string_view>

#include "pipewright/graph/file_io.hpp"

namespace pipewright::exec {

// Reads a whole file. `what` names the kind of file in errors ("npy file", "safetensors file").
// Throws ConfigError when the file cannot be opened or read.
[[nodiscard]] std::string read_file_bytes(const std::string& path, std::string_view what);

}  // namespace pipewright::exec
