// A lowered plan as Chakra execution traces (chakra.hpp).
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

#include <algorithm>
#include <map>
#include <utility>

#include "costs/data_parallel.hpp"
#include "et_def.pb.h"
#include "interop/chakra_attrs.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_dag.hpp"
#include "pipewright/sched/training.hpp"
#include "pipewright/sim/chakra.hpp"

namespace pipewright::sim {
namespace {

using ChakraProtoMsg::AttributeProto;
using sched::Action;
using sched::ActionKind;

std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }

AttributeProto* add_attr(google::protobuf::RepeatedPtrField<AttributeProto>* attrs,
                         const char* name) {
  AttributeProto* a = attrs->Add();
  a->set_name(name);
  return a;
}

template <typename Ints>
void set_list(AttributeProto* a, const Ints& values) {
  auto* list = a->mutable_int64_list();
  for (const auto v : values) list->add_values(v);
}

// Note [Chakra metadata]: the plan's shape as GlobalMetadata attrs (chakra_attrs.hpp names them),
// so that reading the traces back needs no inference.
ChakraProtoMsg::GlobalMetadata metadata(const sched::PlanShape& shape, std::int32_t dp,
                                        std::int32_t rank) {
  ChakraProtoMsg::GlobalMetadata m;
  m.set_version(kChakraVersion);
  auto* attrs = m.mutable_attr();
  add_attr(attrs, chakra::kFormat)->set_string_val(chakra::kFormatValue);
  add_attr(attrs, chakra::kSchedule)->set_string_val(shape.schedule);
  add_attr(attrs, chakra::kRank)->set_int64_val(rank);
  add_attr(attrs, chakra::kPp)->set_int64_val(shape.ranks);
  add_attr(attrs, chakra::kDp)->set_int64_val(dp);
  add_attr(attrs, chakra::kStages)->set_int64_val(shape.stages);
  add_attr(attrs, chakra::kMicrobatches)->set_int64_val(shape.microbatches);
  set_list(add_attr(attrs, chakra::kStageToRank), shape.stage_to_rank);
  std::vector<std::int64_t> edges;
  for (const auto& e : shape.stage_edges) {
    edges.push_back(e.from);
    edges.push_back(e.to);
  }
  set_list(add_attr(attrs, chakra::kStageEdges), edges);
  set_list(add_attr(attrs, chakra::kStageToModelStage), shape.stage_to_model_stage);
  add_attr(attrs, chakra::kForwardOnly)->set_bool_val(shape.forward_only);
  return m;
}

// Simulated duration of every compute action of step 0, by (rank, action).
std::map<std::pair<std::int32_t, Action>, std::int64_t> durations(const SimResult& result) {
  std::map<std::pair<std::int32_t, Action>, std::int64_t> out;
  for (const TimedAction& t : result.actions) {
    if (t.step != 0 || t.stream != Stream::kCompute || t.collective != Collective::kNone) continue;
    out[{t.rank, t.action}] += t.end_ns - t.start_ns;
  }
  return out;
}

void append_delimited(const google::protobuf::MessageLite& msg, std::string& out) {
  google::protobuf::io::StringOutputStream stream(&out);
  PW_CHECK(google::protobuf::util::SerializeDelimitedToZeroCopyStream(msg, &stream), Error,
           "could not encode a Chakra message");
}

}  // namespace

std::vector<std::string> to_chakra(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                   const Cluster& cluster, const SimOptions& options) {
  SimOptions opt = options;
  opt.steps = 1;
  opt.record_actions = true;
  const SimResult result = simulate(plan, costs, cluster, opt);
  const auto took = durations(result);
  const sched::CostTable per_stage = replica_costs(costs, plan.shape);
  const auto stage_cost = [&](std::int32_t s) -> const sched::StageCost& {
    return per_stage.stages[idx(s)];
  };
  const sched::PlanDag dag(plan);
  const sched::PlanRules& rules = dag.rules();
  const std::int32_t pp = plan.shape.ranks;
  const std::int32_t dp = std::max(options.dp.replicas, 1);

  std::vector<std::string> files(idx(pp * dp));
  for (std::int32_t replica = 0; replica < dp; ++replica) {
    for (std::int32_t r = 0; r < pp; ++r) {
      const std::int32_t global = replica * pp + r;
      std::string& out = files[idx(global)];
      append_delimited(metadata(plan.shape, dp, global), out);
      const auto& ops = plan.per_rank[idx(r)];
      std::int64_t last_non_send = -1;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Action& a = ops[i];
        ChakraProtoMsg::Node node;
        node.set_id(i);
        node.set_name(sched::to_string(a));
        if (last_non_send >= 0) node.add_ctrl_deps(static_cast<std::uint64_t>(last_non_send));
        if (!sched::is_send(a.kind)) last_non_send = static_cast<std::int64_t>(i);
        for (const sched::Position p : dag.deps({r, static_cast<std::int32_t>(i)})) {
          if (p.valid() && p.rank == r) node.add_data_deps(static_cast<std::uint64_t>(p.index));
        }
        auto* attrs = node.mutable_attr();
        if (sched::is_comm(a.kind)) {
          const bool send = sched::is_send(a.kind);
          node.set_type(send ? ChakraProtoMsg::COMM_SEND_NODE : ChakraProtoMsg::COMM_RECV_NODE);
          // Activations flow from the edge's producer; its gradient has the same size.
          const bool forward = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF;
          const bool from_here = forward == send;  // SEND_F and RECV_B: this stage produces
          const std::int32_t producer = from_here ? a.stage : a.peer_stage;
          const std::int32_t peer_rank = replica * pp + plan.shape.stage_to_rank[idx(a.peer_stage)];
          add_attr(attrs, send ? "comm_dst" : "comm_src")->set_int32_val(peer_rank);
          add_attr(attrs, "comm_tag")
              ->set_int32_val(static_cast<std::int32_t>(rules.message_id(a)));
          // Note [Precision bytes]: messages cross in the job's precision, as the simulator sends
          // them (issue 44: the table's own bytes were written whatever the precision).
          add_attr(attrs, "comm_size")
              ->set_int64_val(sched::bytes_at_precision(stage_cost(producer).output_bytes,
                                                        costs.precision, options.precision));
        } else if (a.kind == ActionKind::kReduceGrad || a.kind == ActionKind::kUnshard) {
          // DDP all-reduces the stage's gradients; ZeRO reduce-scatters them (Note [ZeRO in the
          // simulator]); UNSHARD all-gathers the stage's parameters.
          node.set_type(ChakraProtoMsg::COMM_COLL_NODE);
          add_attr(attrs, "comm_type")
              ->set_int64_val(a.kind == ActionKind::kUnshard ? ChakraProtoMsg::ALL_GATHER
                              : options.dp.zero_stage > 0    ? ChakraProtoMsg::REDUCE_SCATTER
                                                             : ChakraProtoMsg::ALL_REDUCE);
          // Gradients reduce in --reduce-dtype (fp32 parameter bytes scaled, as the simulator);
          // parameters are gathered in fp32.
          const std::int64_t param_bytes = stage_cost(a.stage).param_bytes;
          add_attr(attrs, "comm_size")
              ->set_int64_val(a.kind == ActionKind::kUnshard
                                  ? param_bytes
                                  : gradient_wire_bytes(param_bytes, options.dp));
          // The stage's replicas: communicator group r + 1 (chakra_comm_groups).
          add_attr(attrs, "pg_name")->set_string_val(std::to_string(r + 1));
        } else {
          node.set_type(ChakraProtoMsg::COMP_NODE);
          const auto it = took.find({r, a});
          const std::int64_t ns = it == took.end() ? 0 : it->second;
          node.set_duration_micros(static_cast<std::uint64_t>((ns + 500) / 1000));
          add_attr(attrs, chakra::kDurationNs)->set_int64_val(ns);
        }
        add_attr(attrs, "is_cpu_op")->set_bool_val(false);
        append_delimited(node, out);
      }
    }
  }
  return files;
}

std::string chakra_comm_groups(std::int32_t pp, std::int32_t dp) {
  std::string out = "{";
  for (std::int32_t r = 0; r < pp; ++r) {
    out += (r ? ", \"" : "\"") + std::to_string(r + 1) + "\": [";
    for (std::int32_t replica = 0; replica < std::max(dp, 1); ++replica) {
      out += (replica ? ", " : "") + std::to_string(replica * pp + r);
    }
    out += "]";
  }
  return out + "}\n";
}

}  // namespace pipewright::sim
