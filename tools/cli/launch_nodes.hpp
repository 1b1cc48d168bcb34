// Multi-node `pipewright launch`: where this node sits (NodeLayout, from flags and Slurm's
// variables) and the link between the launchers of one job (NodeGroup), which carries the job
// id at start and gang semantics afterwards (Note [Launcher links] in launch_nodes.cpp).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pipewright::cli {

struct NodeLayoutFlags {
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  int nproc_per_node = 1;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<int> agent_port;
};

struct NodeLayout {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: single node without --master-port (the launcher picks a free one)
  int agent_port = 0;   // the launchers' own port on master_addr (multi-node only)
};

// Resolves the layout from `flags` and Slurm's variables in `env` (SLURM_JOB_NUM_NODES or
// SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST or SLURM_NODELIST, whose first host is the
// master of a multi-node job). A flag and a Slurm variable that disagree are a ConfigError
// naming both ("--node-rank 1 but SLURM_NODEID=0 (Slurm)"). Multi-node defaults: master port
// 29500 (as torchrun), agent port = master port + 1; a multi-node job without a master address
// is a ConfigError.
[[nodiscard]] NodeLayout resolve_layout(const NodeLayoutFlags& flags,
                                        const std::map<std::string, std::string>& env);

// Something another node did that ends this node's ranks.
struct NodeEvent {
  enum class Kind { kFailure, kLost };
  Kind kind = Kind::kFailure;
  int node = 0;
  std::string text;  // "rank 3 died with signal 9 (SIGKILL)", "no word from its launcher ..."
  int exit_code = 3;
  int cause_class = 1;  // Note [First failure] in cmd_launch.cpp: lower is more likely a cause
};

class NodeGroup {
 public:
  // Joins the launchers of the job: node 0 listens on master_addr:agent_port and waits for the
  // others (each says who it is), then gives them `job_id`; the others connect (retrying) and
  // receive it. Throws TimeoutError if the group is not complete within `join_timeout` (naming
  // the missing nodes), ConfigError for a port that cannot be bound or a node that disagrees on
  // the layout.
  static std::unique_ptr<NodeGroup> join(const NodeLayout& layout, const std::string& job_id,
                                         std::chrono::milliseconds join_timeout,
                                         std::chrono::milliseconds node_timeout);
  virtual ~NodeGroup() = default;

  [[nodiscard]] virtual const std::string& job_id() const = 0;
  // Non-blocking: reads what the other launchers sent, sends heartbeats, notices silent or
  // closed links. Returns what happened since the last call.
  virtual std::vector<NodeEvent> service() = 0;
  // This node's first failure (its cause, not the ranks stopped because of it).
  virtual void report_failure(const std::string& text, int exit_code, int cause_class) = 0;
  // Every rank of this node exited 0.
  virtual void report_done() = 0;
  // Whether this launcher may exit: node 0 once every other node is done, failed or lost.
  [[nodiscard]] virtual bool finished() const = 0;
};

}  // namespace pipewright::cli
