// c10d's Store interface over pipewright's Store, for ProcessGroupGloo's rendezvous. Included
// only by gloo_communicator.cpp (it includes torch's c10d headers).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "compat/torch_compat.hpp"
#include "pipewright/exec/store.hpp"

namespace pipewright::exec::detail {

// c10d::Store over a pipewright Store (which must outlive it), so Gloo can rendezvous through
// any Store: the TCP store across processes, or a MemoryStore across threads in tests.
class StoreAdapter final : public c10d::Store {
 public:
  StoreAdapter(exec::Store& store, std::chrono::milliseconds timeout)
      : c10d::Store(timeout), store_(store) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    store_.set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override { return store_.get(key, timeout_); }
  int64_t add(const std::string& key, int64_t value) override { return store_.add(key, value); }
  bool deleteKey(const std::string& key) override { return store_.erase(key); }
  bool check(const std::vector<std::string>& keys) override { return store_.check(keys); }
  int64_t getNumKeys() override {
    TORCH_CHECK(false, "pipewright Store does not support getNumKeys");
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }
  PW_C10D_STORE_CLONE(StoreAdapter)

 private:
  exec::Store& store_;
};

}  // namespace pipewright::exec::detail
