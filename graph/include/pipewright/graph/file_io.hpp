// The one output writer that every pipewright command and library uses.
//
// Note [Output files]: an output is written so that a crash never leaves a half-written file under
// the final name, and so that writing never destroys what the path points at:
//   - a regular file or a new path: the bytes go to a temporary file in the same folder, are
//     fsynced, the temporary is renamed over the destination and the folder is fsynced. A replaced
//     file keeps its permission bits; a new one gets 0644.
//   - a symlink: the write goes to the link's final target (resolved one link at a time, relative
//     links against the link's folder), which is then treated as above; the link stays a link, and
//     a dangling link creates its target.
//   - an existing non-regular file (a character or block device such as /dev/null, a FIFO): it is
//     opened and written directly, never renamed over or replaced. Opening a FIFO waits for a
//     reader, as a shell redirection does.
//   - a directory, or a socket: ConfigError naming the path.
// It lives in graph/ because graph is the lowest module; every other module depends on it.
#pragma once

#include <string>
#include <string_view>

namespace pipewright {

// Writes `bytes` to `path` as Note [Output files] describes.
// Throws ConfigError naming the path when any step fails; no temporary file is left behind.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace pipewright
