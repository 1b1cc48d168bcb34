#include "pipewright/graph/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pipewright/graph/error.hpp"

namespace pipewright {
namespace {

// Links followed before giving up (the kernel's own limit for path resolution is 40).
constexpr int kMaxSymlinks = 40;

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string errno_text(int err) { return std::strerror(err); }

// Follows `path` through symlinks to the file a write should reach. The result may not exist
// (a new path, or the target of a dangling link). `st` is filled when it exists.
std::string final_target(const std::string& path, struct stat& st, bool& exists) {
  std::string current = path;
  for (int hops = 0; hops <= kMaxSymlinks; ++hops) {
    if (::lstat(current.c_str(), &st) != 0) {
      const int err = errno;
      PW_CHECK(
          err == ENOENT, ConfigError,
          "cannot write '" << path << "': cannot inspect '" << current << "': " << errno_text(err));
      exists = false;
      return current;
    }
    if (!S_ISLNK(st.st_mode)) {
      exists = true;
      return current;
    }
    std::vector<char> buf(static_cast<std::size_t>(st.st_size > 0 ? st.st_size : 255) + 1);
    const ssize_t n = ::readlink(current.c_str(), buf.data(), buf.size());
    PW_CHECK(n >= 0, ConfigError,
             "cannot write '" << path << "': cannot read the symlink '" << current
                              << "': " << errno_text(errno));
    PW_CHECK(static_cast<std::size_t>(n) < buf.size(), ConfigError,
             "cannot write '" << path << "': the symlink '" << current << "' changed while read");
    const std::string target(buf.data(), static_cast<std::size_t>(n));
    current = (!target.empty() && target[0] == '/') ? target : folder_of(current) + "/" + target;
  }
  throw ConfigError("cannot write '" + path + "': more than " + std::to_string(kMaxSymlinks) +
                    " levels of symlinks");
}

// Writes everything or throws; retries on EINTR and short writes.
void write_all(int fd, std::string_view bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    PW_CHECK(n > 0, ConfigError, "cannot write '" << path << "': " << errno_text(errno));
    done += static_cast<std::size_t>(n);
  }
}

// A device, FIFO or other special file: written in place, never replaced (Note [Output files]).
void write_directly(const std::string& path, const std::string& target, std::string_view bytes) {
  int fd = -1;
  do {
    fd = ::open(target.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  PW_CHECK(fd >= 0, ConfigError, "cannot open '" << path << "' for writing: " << errno_text(errno));
  try {
    write_all(fd, bytes, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  // No fsync: devices and FIFOs have nothing durable to flush (fsync of /dev/null is EINVAL).
  PW_CHECK(::close(fd) == 0, ConfigError, "cannot close '" << path << "': " << errno_text(errno));
}

void replace_regular(const std::string& path, const std::string& target, bool exists,
                     const struct stat& st, std::string_view bytes) {
  std::string tmp = target + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  PW_CHECK(fd >= 0, ConfigError,
           "cannot write '" << path << "': cannot create a temporary file in '" << folder_of(target)
                            << "': " << errno_text(errno));
  bool open = true;
  try {
    write_all(fd, bytes, path);
    // mkstemp creates the file 0600: keep the mode of the file being replaced, else 0644.
    const mode_t mode = exists ? (st.st_mode & 07777) : 0644;
    PW_CHECK(::fchmod(fd, mode) == 0, ConfigError,
             "cannot set the mode of '" << tmp << "': " << errno_text(errno));
    PW_CHECK(::fsync(fd) == 0, ConfigError, "cannot fsync '" << tmp << "': " << errno_text(errno));
    open = false;  // close() releases the descriptor even when it reports an error
    PW_CHECK(::close(fd) == 0, ConfigError, "cannot close '" << tmp << "': " << errno_text(errno));
    PW_CHECK(::rename(tmp.c_str(), target.c_str()) == 0, ConfigError,
             "cannot rename '" << tmp << "' to '" << target << "': " << errno_text(errno));
  } catch (...) {
    if (open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable. Failure here is not fatal: the file is complete either way.
  const int dir = ::open(folder_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  PW_CHECK(!path.empty(), ConfigError, "output path is empty");
  struct stat st {};
  bool exists = false;
  const std::string target = final_target(path, st, exists);
  if (!exists || S_ISREG(st.st_mode)) {
    replace_regular(path, target, exists, st, bytes);
    return;
  }
  PW_CHECK(!S_ISDIR(st.st_mode), ConfigError, "cannot write '" << path << "': it is a directory");
  PW_CHECK(!S_ISSOCK(st.st_mode), ConfigError, "cannot write '" << path << "': it is a socket");
  write_directly(path, target, bytes);
}

}  // namespace pipewright
