// Chakra execution traces read back as a lowered plan (chakra.hpp).
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/util/delimited_message_util.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "et_def.pb.h"
#include "interop/chakra_attrs.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sim/chakra.hpp"

namespace pipewright::sim {
namespace {

using sched::Action;
using sched::ActionKind;

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

struct ReadNode {
  Action action;
  std::string where;                 // "file: node i (id n, byte b)"
  std::optional<std::int32_t> peer;  // comm_dst / comm_src
};

struct ReadFile {
  ChakraProtoMsg::GlobalMetadata metadata;
  std::vector<ReadNode> nodes;
  ChakraTpSummary tp;  // Note [Chakra tensor parallelism]: the TP collectives, checked
};

const ChakraProtoMsg::AttributeProto* find_attr(
    const google::protobuf::RepeatedPtrField<ChakraProtoMsg::AttributeProto>& attrs,
    const char* name) {
  for (const auto& a : attrs) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

// The action a node names: the text form, or an OVERLAP_F_B marker "<stage>OVERLAP_F_B".
std::optional<Action> node_action(const std::string& name, std::string* error) {
  static constexpr std::string_view kMarker = "OVERLAP_F_B";
  const std::string_view text(name);
  if (text.size() > kMarker.size() && text.substr(text.size() - kMarker.size()) == kMarker) {
    const std::string_view digits = text.substr(0, text.size() - kMarker.size());
    if (digits.find_first_not_of("0123456789") == std::string_view::npos && digits.size() < 9) {
      return Action::overlap(std::stoi(std::string(digits)));
    }
  }
  return sched::try_parse_action(name, error);
}

// The node type an action is written as.
ChakraProtoMsg::NodeType node_type(ActionKind kind) {
  if (sched::is_send(kind)) return ChakraProtoMsg::COMM_SEND_NODE;
  if (sched::is_recv(kind)) return ChakraProtoMsg::COMM_RECV_NODE;
  if (kind == ActionKind::kReduceGrad || kind == ActionKind::kUnshard)
    return ChakraProtoMsg::COMM_COLL_NODE;
  return ChakraProtoMsg::COMP_NODE;
}

ReadFile read_file(const ChakraFile& file) {
  ReadFile out;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const std::uint8_t*>(file.bytes.data()),
      static_cast<int>(file.bytes.size()));
  bool clean_eof = false;
  PW_CHECK(
      google::protobuf::util::ParseDelimitedFromCodedStream(&out.metadata, &in, &clean_eof),
      ParseError,
      file.name << ": byte 0: "
                << (clean_eof ? "empty file" : "not a Chakra trace (no GlobalMetadata message)"));
  for (std::size_t i = 0;; ++i) {
    const int at = in.CurrentPosition();
    ChakraProtoMsg::Node node;
    if (!google::protobuf::util::ParseDelimitedFromCodedStream(&node, &in, &clean_eof)) {
      PW_CHECK(clean_eof, ParseError,
               file.name << ": byte " << at << ": node " << i
                         << ": not a Node message (truncated or malformed)");
      break;
    }
    const std::string where = file.name + ": node " + std::to_string(i) + " (id " +
                              std::to_string(node.id()) + ", byte " + std::to_string(at) + ")";
    if (const auto* tp = find_attr(node.attr(), chakra::kTpCollective); tp && tp->bool_val()) {
      // Note [Chakra tensor parallelism]: a TP collective after its action; not an action.
      const auto* type = find_attr(node.attr(), "comm_type");
      const auto* size = find_attr(node.attr(), "comm_size");
      PW_CHECK(node.type() == ChakraProtoMsg::COMM_COLL_NODE && type != nullptr &&
                   size != nullptr && find_attr(node.attr(), "pg_name") != nullptr &&
                   node.id() >= idx(out.nodes.size()) && !out.nodes.empty(),
               ParseError,
               where << ": a TP collective must be a COMM_COLL_NODE with comm_type, comm_size and "
                        "pg_name, after the action it follows");
      switch (type->int64_val()) {
        case ChakraProtoMsg::ALL_REDUCE:
          ++out.tp.all_reduce;
          break;
        case ChakraProtoMsg::REDUCE_SCATTER:
          ++out.tp.reduce_scatter;
          break;
        case ChakraProtoMsg::ALL_GATHER:
          ++out.tp.all_gather;
          break;
        default:
          throw ParseError(where +
                           ": a TP collective's comm_type must be ALL_REDUCE, "
                           "REDUCE_SCATTER or ALL_GATHER");
      }
      out.tp.bytes += size->int64_val();
      --i;  // the action index does not move
      continue;
    }
    PW_CHECK(node.id() == i, ParseError,
             where << ": node ids must be 0, 1, 2, ... in file order (the rank's action order)");
    std::string error;
    const auto action = node_action(node.name(), &error);
    PW_CHECK(action, ParseError,
             where << ": name '" << node.name()
                   << "' is not a pipeline action (pipewright reads traces whose nodes are "
                      "named by actions, such as 0F1 or 1SEND_F2): "
                   << error);
    PW_CHECK(node.type() == node_type(action->kind), ParseError,
             where << ": " << node.name() << " is a "
                   << ChakraProtoMsg::NodeType_Name(node_type(action->kind)) << ", not a "
                   << ChakraProtoMsg::NodeType_Name(node.type()));
    ReadNode n{*action, where, std::nullopt};
    if (const auto* peer =
            find_attr(node.attr(), sched::is_send(action->kind) ? "comm_dst" : "comm_src");
        peer && sched::is_comm(action->kind)) {
      n.peer = peer->int32_val();
    }
    out.nodes.push_back(std::move(n));
  }
  return out;
}

std::optional<std::int64_t> int_attr(const ChakraProtoMsg::GlobalMetadata& m, const char* name) {
  const auto* a = find_attr(m.attr(), name);
  if (a == nullptr) return std::nullopt;
  return a->int64_val();
}

std::vector<std::int32_t> int_list(const ChakraProtoMsg::GlobalMetadata& m, const char* name) {
  std::vector<std::int32_t> out;
  if (const auto* a = find_attr(m.attr(), name)) {
    for (const auto v : a->int64_list().values()) out.push_back(static_cast<std::int32_t>(v));
  }
  return out;
}

// The shape pipewright's metadata declares (Note [Chakra metadata]); nothing for other traces.
sched::DeclaredShape declared_shape(const ChakraProtoMsg::GlobalMetadata& m) {
  sched::DeclaredShape d;
  d.lowered = true;
  const auto* format = find_attr(m.attr(), chakra::kFormat);
  if (format == nullptr || format->string_val() != chakra::kFormatValue) return d;
  if (const auto* s = find_attr(m.attr(), chakra::kSchedule)) d.schedule = s->string_val();
  if (const auto v = int_attr(m, chakra::kPp)) d.ranks = static_cast<std::int32_t>(*v);
  if (const auto v = int_attr(m, chakra::kStages)) d.stages = static_cast<std::int32_t>(*v);
  if (const auto v = int_attr(m, chakra::kMicrobatches))
    d.microbatches = static_cast<std::int32_t>(*v);
  d.stage_to_rank = int_list(m, chakra::kStageToRank);
  const auto edges = int_list(m, chakra::kStageEdges);
  d.stage_edges.emplace();
  for (std::size_t i = 0; i + 1 < edges.size(); i += 2) {
    d.stage_edges->push_back({edges[i], edges[i + 1]});
  }
  d.stage_to_model_stage = int_list(m, chakra::kStageToModelStage);
  if (const auto* f = find_attr(m.attr(), chakra::kForwardOnly)) d.forward_only = f->bool_val();
  return d;
}

}  // namespace

sched::LoweredPlan from_chakra(const std::vector<ChakraFile>& files, ChakraTpSummary* tp_summary) {
  PW_CHECK(!files.empty(), ParseError, "no Chakra traces to read");
  std::vector<ReadFile> read;
  read.reserve(files.size());
  for (const ChakraFile& f : files) read.push_back(read_file(f));
  const sched::DeclaredShape declared = declared_shape(read.front().metadata);
  // Note [Chakra tensor parallelism]: file g is GPU g % tp of group g / tp.
  const auto tp_attr = int_attr(read.front().metadata, chakra::kTp);
  const std::size_t tp = tp_attr && *tp_attr > 1 ? idx(*tp_attr) : 1;
  PW_CHECK(files.size() % tp == 0, ParseError,
           files.front().name << ": the metadata says tp " << tp << ", but there are "
                              << files.size() << " traces (pipeline ranks x replicas x tp)");
  const std::size_t groups = files.size() / tp;
  const std::size_t pp = declared.ranks ? idx(*declared.ranks) : groups;
  PW_CHECK(pp >= 1 && groups % pp == 0, ParseError,
           files.front().name << ": the metadata says " << pp << " pipeline ranks, but there are "
                              << files.size()
                              << " traces (pipeline ranks x data-parallel replicas x tp)");
  // Every data-parallel replica, and every GPU of a TP group, runs the pipeline rank's actions.
  const auto base_of = [&](std::size_t g) { return (g / tp) % pp * tp; };
  for (std::size_t g = 0; g < files.size(); ++g) {
    const ReadFile& base = read[base_of(g)];
    const ReadFile& other = read[g];
    if (&base == &other) continue;
    for (std::size_t i = 0; i < std::max(base.nodes.size(), other.nodes.size()); ++i) {
      PW_CHECK(i < base.nodes.size() && i < other.nodes.size() &&
                   base.nodes[i].action == other.nodes[i].action,
               ParseError,
               (i < other.nodes.size() ? other.nodes[i].where : files[g].name + ": end")
                   << ": differs from " << files[base_of(g)].name
                   << " (a data-parallel replica, or a GPU of a TP group, runs the same actions)");
    }
  }
  if (tp_summary != nullptr) {
    *tp_summary = ChakraTpSummary{};
    tp_summary->tp = static_cast<std::int32_t>(tp);
    for (const ReadFile& f : read) {
      tp_summary->all_reduce += f.tp.all_reduce;
      tp_summary->reduce_scatter += f.tp.reduce_scatter;
      tp_summary->all_gather += f.tp.all_gather;
      tp_summary->bytes += f.tp.bytes;
    }
  }
  std::vector<std::vector<Action>> per_rank(pp);
  for (std::size_t r = 0; r < pp; ++r) {
    for (const ReadNode& n : read[r * tp].nodes) per_rank[r].push_back(n.action);
  }
  sched::DeclaredShape d = declared;
  if (d.stage_to_rank && d.stage_to_rank->empty()) d.stage_to_rank.reset();
  if (d.stage_to_model_stage && d.stage_to_model_stage->empty()) d.stage_to_model_stage.reset();
  sched::AnyPlan any = sched::assemble_plan(
      per_rank, d, files.front().name,
      [&](std::size_t r, std::size_t i) { return read[r * tp].nodes[i].where; });
  sched::LoweredPlan plan = std::get<sched::LoweredPlan>(std::move(any));
  // The peers the messages name agree with where the plan places the stages.
  for (std::size_t g = 0; g < files.size(); ++g) {
    const auto replica = static_cast<std::int32_t>(g / tp / pp);
    const auto k = static_cast<std::int32_t>(g % tp);
    for (const ReadNode& n : read[g].nodes) {
      if (!n.peer || n.action.peer_stage < 0 ||
          n.action.peer_stage >= static_cast<std::int32_t>(plan.shape.stage_to_rank.size())) {
        continue;
      }
      const std::int32_t want = (replica * static_cast<std::int32_t>(pp) +
                                 plan.shape.stage_to_rank[idx(n.action.peer_stage)]) *
                                    static_cast<std::int32_t>(tp) +
                                k;
      PW_CHECK(*n.peer == want, ParseError,
               n.where << ": " << sched::to_string(n.action) << " names rank " << *n.peer
                       << ", but stage " << n.action.peer_stage << " runs on rank " << want);
    }
  }
  return plan;
}

}  // namespace pipewright::sim
