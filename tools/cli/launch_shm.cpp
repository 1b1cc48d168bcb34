// Shared memory left by a launch's ranks (launch_shm.hpp).
#include "launch_shm.hpp"

#include <dirent.h>
#include <sys/mman.h>

namespace pipewright::cli {

int remove_job_shared_memory(const std::string& job_id, const std::vector<int>& ranks) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) names.emplace_back(e->d_name);
  ::closedir(dir);
  int removed = 0;
  for (const auto& name : names) {
    for (int r : ranks) {
      const std::string prefix = "pipewright-" + job_id + "-r" + std::to_string(r) + "-";
      if (name.compare(0, prefix.size(), prefix) == 0 && ::shm_unlink(("/" + name).c_str()) == 0) {
        ++removed;
      }
    }
  }
  return removed;
}

}  // namespace pipewright::cli
