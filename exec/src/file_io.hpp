// Whole-file reads and atomic writes for exec/'s data and weight files (npy, safetensors).
//
// Library code cannot use tools::write_output, so exec/ carries its own atomic writer: the bytes
// go to a temporary file in the destination folder, are fsynced, and the file is renamed over the
// destination (then the folder is fsynced), so a crash or an exception never leaves a
// half-written file under the final name.
#pragma once

#include <string>
#include <string_view>

namespace pipewright::exec {

// Reads a whole file. `what` names the kind of file in errors ("npy file", "safetensors file").
// Throws ConfigError when the file cannot be opened or read.
[[nodiscard]] std::string read_file_bytes(const std::string& path, std::string_view what);

// Writes `bytes` to `path` atomically (temp + fsync + rename + fsync of the folder).
// Throws ConfigError naming the path when any step fails; the temporary file is removed.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace pipewright::exec
