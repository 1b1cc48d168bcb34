// Subcommand registry of the `pipewright` CLI. Each cmd_*.cpp registers its subcommand(s) with
//   PW_REGISTER_COMMAND(setup_model);   // void setup_model(CLI::App& app)
// where the setup function adds a subcommand to `app` and sets its callback. Callbacks throw
// pipewright errors; main.cpp is the one place that maps them to exit codes and messages.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pipewright::cli {

using CommandSetup = void (*)(CLI::App&);

// Thrown by a subcommand whose exit status is not an error category (`launch` exits with its
// ranks' status); main() returns `code` without printing anything.
struct ExitStatus {
  int code = 0;
};

// Returns true so it can initialise a static.
bool register_command(CommandSetup setup);
const std::vector<CommandSetup>& registered_commands();

// Writes `content` to `path` with pipewright::write_file_atomically (Note [Output files]: atomic
// for regular files, through symlinks, directly into devices and FIFOs). "-" writes to stdout.
void write_output(const std::string& path, const std::string& content);

// Comma-separated integers, each >= `min`: "8,16,2". An item that
// does not parse is a ConfigError: "<flag>: cannot parse '<item>'; expected <expected>".
std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& flag,
                                         const std::string& expected, std::int64_t min);

// Commands that run another command (`pipewright launch --nproc 2 -- CMD ARGS...`) take CMD and
// its arguments verbatim from argv: CLI11 reorders the arguments of a prefix command, so main()
// cuts them off before parsing (split_command_tail) and the subcommand reads them here.
// `value_options` are the subcommand's own options that take a value (so "--nproc 2" is not the
// start of CMD). Returns the argc to parse; `tail` receives CMD ARGS (empty if none).
int split_command_tail(int argc, char** argv, const std::string& subcommand,
                       const std::vector<std::string>& value_options,
                       std::vector<std::string>& tail);
// The command tail cut off by main() for the subcommand being run.
std::vector<std::string>& command_tail();

}  // namespace pipewright::cli

#define PW_REGISTER_COMMAND(fn) \
  static const bool pw_registered_##fn = ::pipewright::cli::register_command(&fn)
