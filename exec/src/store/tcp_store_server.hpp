// The rendezvous store's server, hosted by rank 0 (Note [Store protocol] in
// tcp_store_server.cpp). Private to exec/.
#pragma once

#include <memory>
#include <string>

namespace pipewright::exec {

// Who may use a store: processes of one job. Two identities match when the world sizes and the
// job ids (empty counts as a value) are equal. Fingerprints are not compared here: ranks of one
// job that differ are named field by field by the job agreement after rendezvous (agreement.hpp);
// without job ids, a process of another job is still refused when it claims a rank that is
// connected, which every rank of a running job is.
struct StoreIdentity {
  std::string job_id;  // `pipewright launch`'s PIPEWRIGHT_JOB_ID or --job-id; may be empty
  int world_size = 1;
  std::string fingerprint;  // a digest of the resolved job; may be empty
};

// Empty when `a` (a client) may join the store of `b` (the host); else why not, one line.
[[nodiscard]] std::string identity_mismatch(const StoreIdentity& client, const StoreIdentity& host);

class TcpStoreServer {
 public:
  // Listens on `addr`:`port` only (not on every address of the host) and serves in a thread
  // until destroyed. Throws ConfigError naming the port when it is in use, or the address when
  // it is not one of this host's.
  TcpStoreServer(const std::string& addr, int port, StoreIdentity identity);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pipewright::exec
