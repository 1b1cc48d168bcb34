// MemoryStore (see store.hpp). The TCP store lives in tcp_store.cpp (it needs c10d).
#include <algorithm>
#include <string>

#include "comm/comm_errors.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

void MemoryStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::vector<std::uint8_t> MemoryStore::get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> lock(mu_);
  return data_.at(key);
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      const std::string text(it->second.begin(), it->second.end());
      try {
        value = std::stoll(text);
      } catch (const std::exception&) {
        throw BackendError("store: add() on key '" + key + "' that holds a non-integer value");
      }
    }
    value += delta;
    const std::string text = std::to_string(value);
    data_[key] = std::vector<std::uint8_t>(text.begin(), text.end());
  }
  cv_.notify_all();
  return value;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::all_of(keys.begin(), keys.end(),
                     [this](const std::string& k) { return data_.count(k) > 0; });
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all_present = [&] {
    return std::all_of(keys.begin(), keys.end(),
                       [this](const std::string& k) { return data_.count(k) > 0; });
  };
  if (cv_.wait_for(lock, timeout, all_present)) return;
  std::string missing;
  for (const auto& k : keys) {
    if (data_.count(k) == 0) missing += (missing.empty() ? "'" : ", '") + k + "'";
  }
  throw TimeoutError("store: " + detail::timed_out_after(timeout) + " waiting for key(s) " +
                     missing);
}

bool MemoryStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

}  // namespace pipewright::exec
