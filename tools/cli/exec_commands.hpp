// The subcommands that need the executor (libtorch, Gloo, MPI, NCCL). They live in a separately
// linked binary, pipewright-exec, so that every other subcommand starts without loading those
// libraries (docs/architecture.md, "Two binaries, one command"). The `pipewright` front end
// lists them in its --help and replaces itself (execv) with pipewright-exec when one is named.
#pragma once

#include <string_view>

namespace pipewright::cli {

struct ExecCommand {
  std::string_view name;
  std::string_view description;
};

inline constexpr ExecCommand kExecCommands[] = {
    {"run", "Train a model with a pipeline schedule on pp x dp ranks (this process is one)"},
    {"calibrate",
     "Measure point-to-point and collective (all-reduce, reduce-scatter, all-gather) times "
     "between local ranks and write a cluster "
     "description for the simulator"},
    {"dataset", "The bundled datasets (char-level language modelling)"},
};

// The description of exec subcommand `name` (one text for the front end's --help and the
// subcommand's own).
constexpr std::string_view exec_command_description(std::string_view name) {
  for (const auto& c : kExecCommands) {
    if (c.name == name) return c.description;
  }
  return {};
}

// The executor binary's file name; it is looked for beside the running `pipewright` and in
// ../libexec/pipewright/ (an installed prefix). PIPEWRIGHT_EXEC_BINARY overrides both.
inline constexpr std::string_view kExecBinaryName = "pipewright-exec";

}  // namespace pipewright::cli
