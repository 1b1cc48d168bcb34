// pipewright's version string ("0.1.0"), set by CMake from project(VERSION).
#pragma once

namespace pipewright {
[[nodiscard]] const char* version() noexcept;
// Which optional capabilities this build has, e.g. "exec=on mpi=on nccl=on graphviz=on".
}  // namespace pipewright
