#include "commands.hpp"

#include "pipewright/graph/error.hpp"

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

std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& flag,
                                         const std::string& expected, std::int64_t min) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    std::size_t used = 0;
    std::int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PW_CHECK(!item.empty() && used == item.size() && value >= min, ConfigError,
             flag << ": cannot parse '" << item << "'; expected " << expected);
    out.push_back(value);
    start = end + 1;
  }
  return out;
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
