#include "file_io.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

std::string read_file_bytes(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in.good(), ConfigError,
           "cannot open " << what << " '" << path << "': " << std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  PW_CHECK(!in.bad(), ConfigError, "cannot read " << what << " '" << path << "'");
  return std::move(out).str();
}

}  // namespace pipewright::exec
