// make_tcp_store(): the rendezvous Store over c10d::TCPStore (rank 0 hosts the server). One of
// the few translation units that include c10d headers.
#include <torch/csrc/distributed/c10d/exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <string>
#include <thread>

#include "comm_errors.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

class TcpStore final : public Store {
 public:
  TcpStore(c10::intrusive_ptr<c10d::TCPStore> store, std::string where)
      : store_(std::move(store)), where_(std::move(where)) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    guarded("set '" + key + "'", [&] { store_->set(key, value); });
  }

  std::vector<std::uint8_t> get(const std::string& key,
                                std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    std::vector<std::uint8_t> value;
    guarded("get '" + key + "'", [&] { value = store_->get(key); });
    return value;
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t value = 0;
    guarded("add '" + key + "'", [&] { value = store_->add(key, delta); });
    return value;
  }

  bool check(const std::vector<std::string>& keys) override {
    bool present = false;
    guarded("check", [&] { present = store_->check(keys); });
    return present;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
    try {
      store_->wait(keys, timeout);
    } catch (const c10d::TimeoutError& e) {
      throw TimeoutError("store at " + where_ + ": " + detail::timed_out_after(timeout) +
                         " waiting for key(s) " + names);
    } catch (const std::exception& e) {
      // c10d reports a wait timeout with a plain c10::Error in some paths.
      const std::string what = e.what();
      if (what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos) {
        throw TimeoutError("store at " + where_ + ": " + detail::timed_out_after(timeout) +
                           " waiting for key(s) " + names);
      }
      throw PeerError("store at " + where_ + " (hosted by rank 0) failed while waiting for " +
                      names + ": " + first_line(what) + " (did rank 0 exit?)");
    }
  }

  bool erase(const std::string& key) override {
    bool existed = false;
    guarded("erase '" + key + "'", [&] { existed = store_->deleteKey(key); });
    return existed;
  }

 private:
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  template <typename F>
  void guarded(const std::string& what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw PeerError("store at " + where_ + " (hosted by rank 0): " + what +
                      " failed: " + first_line(e.what()) + " (did rank 0 exit?)");
    }
  }

  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::string where_;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const WorldInfo& world, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(world.master_port);
  opts.isServer = world.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(world.world_size);
  opts.waitWorkers = false;  // rendezvous() waits, and names the ranks that never joined
  opts.timeout = timeout;
  const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
  // c10d gives up at once when nobody listens yet; rank 0 may simply start later, so clients
  // retry until the deadline.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error;
  while (true) {
    try {
      auto store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, opts);
      return std::make_unique<TcpStore>(std::move(store), where);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      last_error = what.substr(0, what.find('\n'));
      if (world.rank == 0) {
        throw BackendError("rank 0: cannot host the rendezvous store at " + where + ": " +
                           last_error + " (port in use? pick another with --master-port)");
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(100), deadline - now));
  }
  throw TimeoutError("rank " + std::to_string(world.rank) +
                     ": could not reach the rendezvous store at " + where + " within " +
                     std::to_string(timeout.count()) +
                     " ms: rank 0 never joined (not started, or died): " + last_error);
}

}  // namespace pipewright::exec
