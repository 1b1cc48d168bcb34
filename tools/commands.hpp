// Subcommand registry of the `pipewright` CLI. Each cmd_*.cpp registers its subcommand(s) with
//   PW_REGISTER_COMMAND(setup_model);   // void setup_model(CLI::App& app)
// where the setup function adds a subcommand to `app` and sets its callback. Callbacks throw
// pipewright errors; main.cpp is the one place that maps them to exit codes and messages.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pipewright::cli {

using CommandSetup = void (*)(CLI::App&);

// Returns true so it can initialise a static.
bool register_command(CommandSetup setup);
const std::vector<CommandSetup>& registered_commands();

// Writes `content` to `path` atomically (temporary file in the same folder, then rename), so a
// failing command never leaves a half-written output. "-" writes to stdout.
void write_output(const std::string& path, const std::string& content);

}  // namespace pipewright::cli

#define PW_REGISTER_COMMAND(fn) \
  static const bool pw_registered_##fn = ::pipewright::cli::register_command(&fn)
