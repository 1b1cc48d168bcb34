#include "commands.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "pipewright/graph/error.hpp"

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
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    PW_CHECK(out.good(), ConfigError, "cannot open output file '" << path << "' for writing");
    out << content;
    out.flush();
    if (!out.good()) {
      std::remove(tmp.c_str());
      throw ConfigError("cannot write output file '" + path + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw ConfigError("cannot move output into place at '" + path + "'");
  }
}

}  // namespace pipewright::cli
