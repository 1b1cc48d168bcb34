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

// Output checks before any work (issue 20, item 9), so that an output that cannot be written
// fails before step 1 instead of after training. Each throws ConfigError naming `flag` and the
// path and saying why.
//
// check_output_file: `path` can be written by write_file_atomically. An existing non-regular
// file (a FIFO, /dev/null) must be writable in place; otherwise (absent or regular, through
// symlinks) its folder must exist, be a folder and take a new file (a probe file is created and
// removed, so read-only mounts and permissions are both caught) and `path` must not be a folder.
void check_output_file(const std::string& path, std::string_view flag);
// check_output_dir: `dir` exists as a folder or can be created (it is created, as the writer
// would), and takes a new file (a probe named after `rank` and this process, removed again).
void check_output_dir(const std::string& dir, std::string_view flag, int rank);

}  // namespace pipewright::exec
