#include "data/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"

namespace pipewright::exec {

std::string read_file_bytes(const std::string& path, std::string_view what) {
  // Regular files only: a FIFO would block, /dev/zero would never end (issue 20, item 7).
  try {
    (void)json::check_input_file(path, what, std::numeric_limits<std::uint64_t>::max());
  } catch (const InputError& e) {
    throw ConfigError(e.what());
  }
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in.good(), ConfigError,
           "cannot open " << what << " '" << path << "': " << std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  PW_CHECK(!in.bad(), ConfigError, "cannot read " << what << " '" << path << "'");
  return std::move(out).str();
}

namespace {

namespace fs = std::filesystem;

// Creates and removes a file in `dir`; the errno text of the failure, empty on success.
std::string probe_folder(const fs::path& dir, const std::string& tag) {
  const fs::path probe = dir / (".pipewright-probe-" + tag + "-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

}  // namespace

void check_output_file(const std::string& path, std::string_view flag) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // follows symlinks
  PW_CHECK(st.type() != fs::file_type::directory, ConfigError,
           flag << " " << path << ": is a folder, not a file");
  if (fs::exists(st) && st.type() != fs::file_type::regular) {
    PW_CHECK(::access(path.c_str(), W_OK) == 0, ConfigError,
             flag << " " << path << ": cannot be written: " << std::strerror(errno));
    return;
  }
  // Where the writer puts its temporary file: beside the symlink's target, else beside `path`.
  fs::path target = fs::exists(st) ? fs::canonical(path, ec) : fs::path(path);
  if (ec) target = path;
  fs::path dir = fs::absolute(target, ec).parent_path();
  const fs::file_status dst = fs::status(dir, ec);
  PW_CHECK(fs::exists(dst), ConfigError,
           flag << " " << path << ": its folder " << dir.string() << " does not exist");
  PW_CHECK(dst.type() == fs::file_type::directory, ConfigError,
           flag << " " << path << ": " << dir.string() << " is not a folder");
  const std::string why = probe_folder(dir, "out");
  PW_CHECK(why.empty(), ConfigError,
           flag << " " << path << ": cannot create files in " << dir.string() << ": " << why);
}

void check_output_dir(const std::string& dir, std::string_view flag, int rank) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  PW_CHECK(!ec, ConfigError, flag << " " << dir << ": cannot be created: " << ec.message());
  PW_CHECK(fs::is_directory(dir, ec), ConfigError, flag << " " << dir << ": is not a folder");
  const std::string why = probe_folder(dir, "rank" + std::to_string(rank));
  PW_CHECK(why.empty(), ConfigError, flag << " " << dir << ": cannot create files in it: " << why);
}

}  // namespace pipewright::exec
