#include "commands.hpp"

#include <algorithm>

#include <iostream>

#include "pipewright/graph/file_io.hpp"

namespace pipewright::cli {

namespace {
std::vector<CommandSetup>& registry() {
  static std::vector<CommandSetup> commands;
  return commands;
}
}  // namespace

bool register_command(CommandSetup setup) {
  registry().push_back(setup);
  return true;
}

const std::vector<CommandSetup>& registered_commands() { return registry(); }

void write_output(const std::string& path, const std::string& content) {
  if (path == "-" || path.empty()) {
    std::cout << content;
    std::cout.flush();
    return;
  }
  write_file_atomically(path, content);  // Note [Output files]
}

std::vector<std::string>& command_tail() {
  static std::vector<std::string> tail;
  return tail;
}

int split_command_tail(int argc, char** argv, const std::string& subcommand,
                       const std::vector<std::string>& value_options,
                       std::vector<std::string>& tail) {
  tail.clear();
  // Find the subcommand: the first argument that is not a global option or its value.
  int i = 1;
  while (i < argc) {
    const std::string a = argv[i];
    if (a == "--log-level") {
      i += 2;
    } else if (a.rfind("--", 0) == 0 || (a.size() > 1 && a[0] == '-')) {
      ++i;
    } else {
      break;
    }
  }
  if (i >= argc || subcommand != argv[i]) return argc;
  // Skip the subcommand's own options; the command starts at "--" or the first positional.
  for (++i; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (int j = i + 1; j < argc; ++j) tail.emplace_back(argv[j]);
      return i;
    }
    if (a.empty() || a[0] != '-') break;
    const bool takes_value =
        a.find('=') == std::string::npos &&
        std::find(value_options.begin(), value_options.end(), a) != value_options.end();
    if (takes_value) ++i;
  }
  for (int j = i; j < argc; ++j) tail.emplace_back(argv[j]);
  return i;
}

}  // namespace pipewright::cli
