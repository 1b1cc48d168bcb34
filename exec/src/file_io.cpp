#include "file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes everything or throws; retries on EINTR and short writes.
void write_all(int fd, std::string_view bytes, const std::string& tmp) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    PW_CHECK(n > 0, ConfigError, "cannot write '" << tmp << "': " << std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::string read_file_bytes(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in.good(), ConfigError,
           "cannot open " << what << " '" << path << "': " << std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  PW_CHECK(!in.bad(), ConfigError, "cannot read " << what << " '" << path << "'");
  return std::move(out).str();
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  PW_CHECK(!path.empty(), ConfigError, "output path is empty");
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  PW_CHECK(fd >= 0, ConfigError,
           "cannot create a temporary file next to '" << path << "': " << std::strerror(errno));
  bool open = true;
  try {
    write_all(fd, bytes, tmp);
    PW_CHECK(::fsync(fd) == 0, ConfigError,
             "cannot fsync '" << tmp << "': " << std::strerror(errno));
    // mkstemp creates the file 0600; weight files should be readable like any output.
    ::fchmod(fd, 0644);
    open = false;  // close() releases the descriptor even when it reports an error
    PW_CHECK(::close(fd) == 0, ConfigError,
             "cannot close '" << tmp << "': " << std::strerror(errno));
  } catch (...) {
    if (open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    PW_CHECK(false, ConfigError,
             "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(err));
  }
  // Make the rename itself durable. Failure here is not fatal: the file is complete either way.
  const int dir = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace pipewright::exec
