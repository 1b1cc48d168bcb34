// A lowered plan as Chakra execution traces (chakra.hpp).
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

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
                                        std::int32_t tp, std::int32_t rank) {
  ChakraProtoMsg::GlobalMetadata m;
  m.set_version(kChakraVersion);
  auto* attrs = m.mutable_attr();
  add_attr(attrs, chakra::kFormat)->set_string_val(chakra::kFormatValue);
  add_attr(attrs, chakra::kSchedule)->set_string_val(shape.schedule);
  add_attr(attrs, chakra::kRank)->set_int64_val(rank);
  add_attr(attrs, chakra::kPp)->set_int64_val(shape.ranks);
  add_attr(attrs, chakra::kDp)->set_int64_val(dp);
  if (tp > 1) add_attr(attrs, chakra::kTp)->set_int64_val(tp);
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
                                   const Cluster& cluster, const SimOptions& options,
                                   const ChakraTensorParallel& tensor) {
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
  const std::int32_t tp = std::max(tensor.tp, 1);
  PW_CHECK(
      tp == 1 || tensor.stages.empty() || tensor.stages.size() == idx(plan.shape.model_stages()),
      ConfigError,
      "Chakra export: " << tensor.stages.size() << " stages of TP collectives for a plan of "
                        << plan.shape.model_stages() << " model stages");
  // Note [Chakra tensor parallelism]: the TP collectives after a compute action.
  const auto tp_of = [&](const Action& a) -> StageTpCollectives {
    if (tp == 1 || tensor.stages.empty() || a.stage < 0) return {};
    const bool pass = a.kind == ActionKind::kForward || a.kind == ActionKind::kFullBackward ||
                      a.kind == ActionKind::kBackwardInput;
    if (!pass) return {};
    return tensor.stages[idx(plan.shape.model_stage(a.stage))];
  };

  std::vector<std::string> files(idx(pp * dp * tp));
  for (std::int32_t replica = 0; replica < dp; ++replica) {
    for (std::int32_t r = 0; r < pp; ++r) {
      for (std::int32_t k = 0; k < tp; ++k) {
        const std::int32_t group = replica * pp + r;
        const std::int32_t global = group * tp + k;
        std::string& out = files[idx(global)];
        append_delimited(metadata(plan.shape, dp, tp, global), out);
        const auto& ops = plan.per_rank[idx(r)];
        // The node that stands for action i's end: i, or its last TP collective.
        std::vector<std::uint64_t> end_of(ops.size());
        std::uint64_t next_id = ops.size();
        std::int64_t last_non_send = -1;
        for (std::size_t i = 0; i < ops.size(); ++i) {
          const Action& a = ops[i];
          end_of[i] = i;
          ChakraProtoMsg::Node node;
          node.set_id(i);
          node.set_name(sched::to_string(a));
          if (last_non_send >= 0)
            node.add_ctrl_deps(end_of[idx(static_cast<std::int32_t>(last_non_send))]);
          if (!sched::is_send(a.kind)) last_non_send = static_cast<std::int64_t>(i);
          for (const sched::Position p : dag.deps({r, static_cast<std::int32_t>(i)})) {
            if (p.valid() && p.rank == r) node.add_data_deps(end_of[idx(p.index)]);
          }
          auto* attrs = node.mutable_attr();
          const StageTpCollectives coll = tp_of(a);
          if (sched::is_comm(a.kind)) {
            const bool send = sched::is_send(a.kind);
            node.set_type(send ? ChakraProtoMsg::COMM_SEND_NODE : ChakraProtoMsg::COMM_RECV_NODE);
            // Activations flow from the edge's producer; its gradient has the same size.
            const bool forward = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF;
            const bool from_here = forward == send;  // SEND_F and RECV_B: this stage produces
            const std::int32_t producer = from_here ? a.stage : a.peer_stage;
            const std::int32_t peer_rank =
                (replica * pp + plan.shape.stage_to_rank[idx(a.peer_stage)]) * tp + k;
            add_attr(attrs, send ? "comm_dst" : "comm_src")->set_int32_val(peer_rank);
            add_attr(attrs, "comm_tag")
                ->set_int32_val(static_cast<std::int32_t>(rules.message_id(a)));
            // Note [Precision bytes]: messages cross in the job's precision, as the simulator
            // sends them (issue 44: the table's own bytes were written whatever the precision).
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
            // Gradients reduce in --reduce-dtype (fp32 parameter bytes scaled, as the
            // simulator); parameters are gathered in fp32.
            const std::int64_t param_bytes = stage_cost(a.stage).param_bytes;
            add_attr(attrs, "comm_size")
                ->set_int64_val(a.kind == ActionKind::kUnshard
                                    ? param_bytes
                                    : gradient_wire_bytes(param_bytes, options.dp));
            // The stage's replicas: communicator group r * tp + k + 1 (chakra_comm_groups).
            add_attr(attrs, "pg_name")->set_string_val(std::to_string(r * tp + k + 1));
          } else {
            node.set_type(ChakraProtoMsg::COMP_NODE);
            const auto it = took.find({r, a});
            // The TP collectives are nodes of their own: the compute without them.
            const std::int64_t ns = std::max<std::int64_t>(
                (it == took.end() ? 0 : it->second) - coll.per_pass * coll.ns, 0);
            node.set_duration_micros(static_cast<std::uint64_t>((ns + 500) / 1000));
            add_attr(attrs, chakra::kDurationNs)->set_int64_val(ns);
          }
          add_attr(attrs, "is_cpu_op")->set_bool_val(false);
          append_delimited(node, out);
          // Megatron's collectives of this pass, one after another on the TP group.
          const std::int32_t kinds = tensor.sequence_parallel ? 2 : 1;
          for (std::int32_t c = 0; c < coll.per_pass * kinds; ++c) {
            ChakraProtoMsg::Node cn;
            const std::uint64_t id = next_id++;
            cn.set_id(id);
            const auto type = !tensor.sequence_parallel ? ChakraProtoMsg::ALL_REDUCE
                              : c % 2 == 0              ? ChakraProtoMsg::REDUCE_SCATTER
                                                        : ChakraProtoMsg::ALL_GATHER;
            cn.set_name(sched::to_string(a) + ":tp" + std::to_string(c));
            cn.set_type(ChakraProtoMsg::COMM_COLL_NODE);
            cn.add_data_deps(end_of[i]);
            auto* cattrs = cn.mutable_attr();
            add_attr(cattrs, "comm_type")->set_int64_val(type);
            add_attr(cattrs, "comm_size")->set_int64_val(coll.bytes);
            add_attr(cattrs, "pg_name")
                ->set_string_val(std::to_string(pp * tp + replica * pp + r + 1));
            add_attr(cattrs, chakra::kTpCollective)->set_bool_val(true);
            add_attr(cattrs, "is_cpu_op")->set_bool_val(false);
            append_delimited(cn, out);
            end_of[i] = id;
          }
        }
      }
    }
  }
  return files;
}

std::string chakra_comm_groups(std::int32_t pp, std::int32_t dp, std::int32_t tp) {
  dp = std::max(dp, 1);
  tp = std::max(tp, 1);
  std::string out = "{";
  int group = 0;
  const auto add = [&](const std::vector<std::int32_t>& ranks) {
    out += group == 0 ? "\"" : ", \"";
    out += std::to_string(++group) + "\": [";
    for (std::size_t i = 0; i < ranks.size(); ++i)
      out += (i ? ", " : "") + std::to_string(ranks[i]);
    out += "]";
  };
  for (std::int32_t r = 0; r < pp; ++r) {  // data-parallel groups
    for (std::int32_t k = 0; k < tp; ++k) {
      std::vector<std::int32_t> ranks;
      for (std::int32_t replica = 0; replica < dp; ++replica)
        ranks.push_back((replica * pp + r) * tp + k);
      add(ranks);
    }
  }
  if (tp > 1) {  // TP groups
    for (std::int32_t g = 0; g < pp * dp; ++g) {
      std::vector<std::int32_t> ranks;
      for (std::int32_t k = 0; k < tp; ++k) ranks.push_back(g * tp + k);
      add(ranks);
    }
  }
  return out + "}\n";
}

}  // namespace pipewright::sim
