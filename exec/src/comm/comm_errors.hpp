// Error-message helpers shared by every Communicator backend, so that a timeout or a dead peer
// reads the same whichever transport reported it:
//   "rank 1: recv from rank 2 (RECV_F stage 3 microbatch 2 step 7): timed out after 5000 ms"
// Private to exec/.
#pragma once

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

// "rank <self>: <op> (<ctx>)". `op` already names the peer when there is one ("recv from rank 2").
inline std::string op_prefix(int self_global_rank, const std::string& op, const OpContext& ctx) {
  std::ostringstream os;
  os << "rank " << self_global_rank << ": " << op << " (" << ctx.describe() << ")";
  return os.str();
}

// "[0, 2, 3]"
inline std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

inline std::string timed_out_after(std::chrono::milliseconds timeout) {
  return "timed out after " + std::to_string(timeout.count()) + " ms";
}

// Operation names used in messages; "send to rank 3", "all_reduce".
inline std::string p2p_name(bool is_send, int peer_global_rank) {
  return std::string(is_send ? "send to rank " : "recv from rank ") +
         std::to_string(peer_global_rank);
}

}  // namespace pipewright::exec::detail
