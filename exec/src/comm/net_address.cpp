// The route-chosen local address for Gloo's device (backends.hpp). Moved out of
// gloo_communicator.cpp unchanged (issue 44: that file reached the 600-line limit).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "comm/backends.hpp"

namespace pipewright::exec::detail {

// The local address of the route to `host` (the master): what this rank's peers reach it by,
// as PyTorch picks Gloo's interface. A UDP connect() sends nothing; it only chooses the route.
// Empty if `host` does not resolve or has no route.
std::string address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return {};
  std::string out;
  for (addrinfo* p = res; p != nullptr && out.empty(); p = p->ai_next) {
    const int fd = ::socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET_ADDRSTRLEN] = {};
      if (::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr) out = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return out;
}

}  // namespace pipewright::exec::detail
