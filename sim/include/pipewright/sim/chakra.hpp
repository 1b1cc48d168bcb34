// Chakra execution traces (MLCommons Chakra; ASTRA-sim 2.x's workload input, docs/interop.md):
// a lowered plan as one trace per rank, and such traces read back as the plan.
//
// A trace is Chakra's file format: a GlobalMetadata message, then one Node message per action,
// each message preceded by its length as a varint (sim/proto/et_def.proto; Chakra's
// protolib.encodeMessage). Node `i` of rank r's trace is action i of the plan's rank r:
//   F / B / I / W / OPTIM, OVERLAP_F_B marker  COMP_NODE, duration_micros = the action's simulated
//                                              duration (exact: attr pw_duration_ns)
//   SEND_* / RECV_*                            COMM_SEND_NODE / COMM_RECV_NODE, attrs comm_dst /
//                                              comm_src (global rank), comm_tag (the message:
//                                              the same on both ends), comm_size (bytes: the
//                                              output_bytes of the edge's producer stage)
//   REDUCE_GRAD                                COMM_COLL_NODE ALL_REDUCE (attr comm_type) of the
//                                              stage's gradients (comm_size = param_bytes) over
//                                              its data-parallel replicas: communicator group
//                                              pg_name "<pipeline rank + 1>" (chakra_comm_groups)
// Node names are the actions' text form ("1F0", "0SEND_F3"); ids are the action indices.
// data_deps: what the action waits for on its own rank (sched::PlanDag, the dependency function
// of the simulator; a RECV's wait for the other rank's SEND is the comm_tag match). ctrl_deps: the
// rank's previous action that is not a SEND (a rank runs its list in order; sends leave the
// compute stream, as in the simulator). With dp replicas there are pp x dp traces: global rank
// g = replica * pp + pipeline rank, as `run` numbers them. The metadata's attrs (pw_*) carry the
// plan's shape, so that from_chakra(to_chakra(plan)) == plan.
//
// Note [Chakra tensor parallelism] (issue 46): with ChakraTensorParallel::tp > 1 each pipeline
// rank of each replica is a group of tp GPUs and there is one trace per GPU: pp x dp x tp traces,
// global rank g = (replica * pp + pipeline rank) * tp + k (Megatron's order: a TP group is
// consecutive ranks). Every GPU of a group runs the same actions; its messages go to the same k of
// the peer group; its data-parallel group is pg_name "<pipeline rank * tp + k + 1>". After each
// F and each B or I of a stage come the stage's TP collectives (StageTpCollectives::per_pass of
// them, in order, each depending on the one before): COMM_COLL_NODE ALL_REDUCE of comm_size
// bytes, or with sequence parallelism a REDUCE_SCATTER and an ALL_GATHER in place of each, on the
// TP group pg_name "<pp * tp + replica * pp + pipeline rank + 1>"; they carry attr pw_tp and ids
// after the rank's actions, and the compute node's duration is the simulated one less their time
// (the simulator folds them into F and B). What depended on the compute node depends on its last
// collective. The reader skips them after checking them (ChakraTpSummary counts them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/parallel_model.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// The Chakra schema version pipewright writes in GlobalMetadata.version.
inline constexpr const char* kChakraVersion = "0.0.4";

// Note [Chakra tensor parallelism]: the TP group size, Megatron's sequence parallelism, and the
// collectives of each model stage (parallel_model.hpp, tp_collectives_per_stage); tp 1: none.
struct ChakraTensorParallel {
  std::int32_t tp = 1;
  bool sequence_parallel = false;
  std::vector<StageTpCollectives> stages;  // per model stage; empty: no collectives
};

// One trace file's bytes per global rank (pp ranks x options.dp.replicas x tp), durations from
// one simulated step of `plan` with these costs, cluster and options. Throws as simulate() does.
[[nodiscard]] std::vector<std::string> to_chakra(const sched::LoweredPlan& plan,
                                                 const sched::CostTable& costs,
                                                 const Cluster& cluster, const SimOptions& options,
                                                 const ChakraTensorParallel& tp = {});

// ASTRA-sim's communicator-group file (--comm-group-configuration) for the traces' pg_name attrs:
// {"1": [the global ranks of pipeline rank 0's replicas], "2": [...], ...}; with tp > 1 the
// data-parallel groups of each (pipeline rank, k) and then the TP groups (Note [Chakra tensor
// parallelism]).
[[nodiscard]] std::string chakra_comm_groups(std::int32_t pp, std::int32_t dp, std::int32_t tp = 1);

// The TP collectives the reader found (Note [Chakra tensor parallelism]), over all traces.
struct ChakraTpSummary {
  std::int32_t tp = 1;
  std::int64_t all_reduce = 0;
  std::int64_t reduce_scatter = 0;
  std::int64_t all_gather = 0;
  std::int64_t bytes = 0;  // sum of their comm_size
};

// One trace file: its name (for messages) and bytes.
struct ChakraFile {
  std::string name;
  std::string bytes;
};

// The plan the traces of pipeline ranks 0..pp-1 hold (further files, the other data-parallel
// replicas, are checked to hold the same actions). Traces pipewright did not write are read when
// every node is named by an action; the shape is then inferred as for a CSV. Throws ParseError
// naming the file and the message (byte offset, node index and id) that is malformed, not an
// action, out of order, or disagrees with another rank's trace.
// With tp > 1 (metadata pw_tp) the traces are pp x dp x tp GPUs; `tp_summary`, when given,
// receives the TP collectives read (each checked: a COMM_COLL_NODE with comm_type ALL_REDUCE,
// REDUCE_SCATTER or ALL_GATHER on its TP group).
[[nodiscard]] sched::LoweredPlan from_chakra(const std::vector<ChakraFile>& files,
                                             ChakraTpSummary* tp_summary = nullptr);

}  // namespace pipewright::sim
