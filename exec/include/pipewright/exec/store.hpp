// A small key-value Store for rendezvous, modelled on c10d::Store: ranks publish and wait for
// keys (joined ranks, Gloo addresses, NCCL unique ids). Every blocking call has a deadline and
// throws TimeoutError naming the key(s) on expiry; transport failures throw BackendError.
//
// Implementations: make_tcp_store() (pipewright's TCP store, hosted by rank 0: the real
// multi-process store; Note [Store protocol] in exec/src/store/tcp_store_server.cpp) and
// MemoryStore (in-process, for tests and FakeWorld threads).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pipewright::exec {

struct WorldInfo;

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<std::uint8_t>& value) = 0;
  // Blocks until `key` exists; TimeoutError after `timeout`.
  [[nodiscard]] virtual std::vector<std::uint8_t> get(const std::string& key,
                                                      std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (0 if absent) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // True if every key exists (non-blocking).
  [[nodiscard]] virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists; TimeoutError (naming the missing keys) after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Removes `key`; returns whether it existed.
  virtual bool erase(const std::string& key) = 0;
  // The ranks that have not been heard from for longer than `silent_for` (hung, stopped) or
  // whose connection closed without finishing (died), ascending; used to name a hung rank when
  // an operation times out. A store that cannot tell (MemoryStore) returns none.
  [[nodiscard]] virtual std::vector<int> unresponsive_ranks(std::chrono::milliseconds silent_for) {
    (void)silent_for;
    return {};
  }
};

// The TCP store of `world`: rank 0 listens on world.master_addr:world.master_port only (the
// address must be one of its own; 127.0.0.1 for local jobs), every rank (rank 0 too) connects
// as a client and presents the job's identity: world.job_id, world.world_size and
// `fingerprint` (a digest of the resolved job). Throws ConfigError when the port is in use
// (rank 0) or when the store belongs to another job (the other job is untouched). Connecting
// retries until `timeout`; then TimeoutError naming the address and rank 0. `timeout` is also
// the deadline of the store's own requests. Needs PIPEWRIGHT_WITH_EXEC.
[[nodiscard]] std::unique_ptr<Store> make_tcp_store(const WorldInfo& world,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& fingerprint = "");

// An in-process store, thread-safe.
class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  [[nodiscard]] std::vector<std::uint8_t> get(const std::string& key,
                                              std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  [[nodiscard]] bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool erase(const std::string& key) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::uint8_t>> data_;
};

}  // namespace pipewright::exec
