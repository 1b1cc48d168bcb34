// make_local_nccl_communicators(): every rank of a world in this process, one device each.
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "nccl/nccl_communicator.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

// The smallest rendezvous store: set, and get that blocks until the key exists.
class LocalExchange {
 public:
  void set(const std::string& key, const std::string& value) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    cv_.notify_all();
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool found =
        cv_.wait_for(lock, timeout, [&] { return values_.find(key) != values_.end(); });
    PW_CHECK(found, TimeoutError,
             "in-process NCCL rendezvous: key '" << key << "' was not published within "
                                                 << timeout.count() << " ms (rank 0 failed?)");
    return values_[key];
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_nccl_communicators(
    const std::vector<int>& devices, std::chrono::milliseconds timeout) {
  PW_CHECK(!devices.empty(), ConfigError, "make_local_nccl_communicators: no devices");
  const int n = static_cast<int>(devices.size());
  auto exchange = std::make_shared<LocalExchange>();
  std::vector<std::unique_ptr<Communicator>> comms(devices.size());
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        NcclOptions options;
        options.rank = r;
        options.size = n;
        options.device = devices[static_cast<std::size_t>(r)];
        options.timeout = timeout;
        options.store_set = [exchange](const std::string& k, const std::string& v) {
          exchange->set(k, v);
        };
        options.store_get = [exchange, timeout](const std::string& k) {
          return exchange->get(k, timeout);
        };
        comms[static_cast<std::size_t>(r)] = make_nccl_communicator(options);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return comms;
}

}  // namespace pipewright::exec
