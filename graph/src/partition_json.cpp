// Partition <-> JSON (format in docs/partitioning.md).
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/graph/partition.hpp"

namespace pipewright::graph {

namespace {

using json::At;
using json::Json;
using OrderedJson = nlohmann::ordered_json;

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMaxIndex = std::numeric_limits<int>::max();

OrderedJson value_to_json(const StageValue& v) {
  OrderedJson j;
  j["node"] = v.node;
  j["output"] = v.output;
  return j;
}

StageValue parse_value(const At& at) {
  at.only_keys({"node", "output"});
  return StageValue{static_cast<int>(at["node"].as_int(-1, kMaxIndex)),
                    static_cast<int>(at["output"].as_int(0, kMaxIndex))};
}

std::vector<StageValue> parse_values(const At& at) {
  at.expect_array();
  std::vector<StageValue> out;
  for (std::size_t i = 0; i < at.value.size(); ++i) out.push_back(parse_value(at[i]));
  return out;
}

}  // namespace

std::string to_json(const Partition& p) {
  OrderedJson j;
  j["version"] = 1;
  j["model"] = p.model_name;
  j["method"] = p.method;
  j["num_stages"] = p.num_stages();
  j["max_stage_ms"] = p.max_stage_ms();
  OrderedJson memory;
  memory["gradient_bytes_per_param_byte"] = p.gradient_bytes_per_param_byte;
  memory["optimizer_bytes_per_param_byte"] = p.optimizer_bytes_per_param_byte;
  if (p.in_flight_microbatches) {
    memory["in_flight_microbatches"] = *p.in_flight_microbatches;
  } else {
    memory["in_flight_microbatches"] = "1f1b";
  }
  if (p.memory_limit_bytes) memory["memory_limit_bytes"] = *p.memory_limit_bytes;
  if (p.recompute) memory["recompute"] = "full";
  if (p.activation_element_bytes != 4)
    memory["activation_element_bytes"] = p.activation_element_bytes;
  j["memory_model"] = memory;
  OrderedJson stages = OrderedJson::array();
  for (const StageInfo& s : p.graph.stages) {
    OrderedJson sj;
    sj["index"] = s.index;
    OrderedJson names = OrderedJson::array();
    for (int v : s.nodes) names.push_back(p.node_names.at(static_cast<std::size_t>(v)));
    sj["nodes"] = names;
    sj["node_indices"] = s.nodes;
    sj["forward_ms"] = s.forward_ms;
    sj["backward_ms"] = s.backward_ms;
    if (s.input_grad_ms) sj["input_grad_ms"] = *s.input_grad_ms;
    if (s.weight_grad_ms) sj["weight_grad_ms"] = *s.weight_grad_ms;
    sj["param_bytes"] = s.param_bytes;
    sj["activation_bytes"] = s.activation_bytes;
    sj["output_bytes"] = s.output_bytes;
    sj["memory_bytes"] = s.memory_bytes;
    sj["in_flight_microbatches"] = s.in_flight_microbatches;
    OrderedJson inputs = OrderedJson::array();
    for (const StageValue& v : s.inputs) inputs.push_back(value_to_json(v));
    sj["inputs"] = inputs;
    OrderedJson outputs = OrderedJson::array();
    for (const StageValue& v : s.outputs) outputs.push_back(value_to_json(v));
    sj["outputs"] = outputs;
    stages.push_back(sj);
  }
  j["stages"] = stages;
  OrderedJson cuts = OrderedJson::array();
  for (const CutValue& c : p.graph.edges) {
    OrderedJson cj;
    cj["producer_stage"] = c.producer_stage;
    cj["producer_output"] = c.producer_output;
    cj["consumer_stage"] = c.consumer_stage;
    cj["consumer_input"] = c.consumer_input;
    cj["bytes"] = c.bytes;
    cj["producer_node"] = c.producer_node;
    cj["consumer_node"] = c.consumer_node;
    cuts.push_back(cj);
  }
  j["cuts"] = cuts;
  return j.dump(2) + "\n";
}

Partition parse_partition(std::string_view json_text, const std::string& source_name) {
  const json::Document doc =
      json::parse_strict(json_text, source_name, {kMaxModelFileBytes, kMaxJsonDepth});
  const At at{doc.root, doc.source, ""};
  at.only_keys({"version", "model", "method", "num_stages", "max_stage_ms", "memory_model",
                "stages", "cuts"});
  if (at.has("version")) (void)at["version"].as_int(1, 1);
  Partition p;
  p.model_name = at["model"].as_string();
  p.method = at["method"].as_string();
  if (p.method != "custom" && !parse_partition_method(p.method)) {
    at["method"].fail("must be \"uniform\", \"balanced\", \"memory\" or \"custom\", got \"" +
                      p.method + "\"");
  }
  const At memory = at["memory_model"];
  memory.only_keys({"gradient_bytes_per_param_byte", "optimizer_bytes_per_param_byte",
                    "in_flight_microbatches", "memory_limit_bytes", "recompute",
                    "activation_element_bytes"});
  p.gradient_bytes_per_param_byte = memory["gradient_bytes_per_param_byte"].as_finite_nonnegative();
  p.optimizer_bytes_per_param_byte =
      memory["optimizer_bytes_per_param_byte"].as_finite_nonnegative();
  const At in_flight = memory["in_flight_microbatches"];
  if (in_flight.value.is_string()) {
    if (in_flight.as_string() != "1f1b") in_flight.fail("must be \"1f1b\" or an integer >= 1");
  } else {
    p.in_flight_microbatches = static_cast<int>(in_flight.as_int(1, kMaxIndex));
  }
  if (memory.has("memory_limit_bytes")) {
    p.memory_limit_bytes = memory["memory_limit_bytes"].as_int(1, kMaxInt);
  }
  if (memory.has("recompute")) {
    const std::string recompute = memory["recompute"].as_string();
    if (recompute != "none" && recompute != "full") {
      memory["recompute"].fail("must be \"none\" or \"full\", got \"" + recompute + "\"");
    }
    p.recompute = recompute == "full";
  }
  if (memory.has("activation_element_bytes")) {
    const At bytes = memory["activation_element_bytes"];
    p.activation_element_bytes = static_cast<int>(bytes.as_int(2, 4));
    if (p.activation_element_bytes == 3) bytes.fail("must be 2 (bf16, fp16) or 4 (fp32)");
  }

  const At stages = at["stages"];
  stages.expect_array();
  if (stages.value.empty()) stages.fail("a partition needs at least one stage");
  if (stages.value.size() > kMaxModelNodes) stages.fail("too many stages");
  const int num_stages = static_cast<int>(stages.value.size());
  if (at.has("num_stages")) {
    const std::int64_t declared = at["num_stages"].as_int(1, kMaxIndex);
    if (declared != num_stages) {
      at["num_stages"].fail("says " + std::to_string(declared) + " but \"stages\" has " +
                            std::to_string(num_stages));
    }
  }
  std::vector<std::pair<int, std::string>> assigned;  // (node index, name)
  for (std::size_t i = 0; i < stages.value.size(); ++i) {
    const At s = stages[i];
    s.only_keys({"index", "nodes", "node_indices", "forward_ms", "backward_ms", "input_grad_ms",
                 "weight_grad_ms", "param_bytes", "activation_bytes", "output_bytes",
                 "memory_bytes", "in_flight_microbatches", "inputs", "outputs"});
    StageInfo info;
    info.index = static_cast<int>(s["index"].as_int(0, kMaxIndex));
    if (info.index != static_cast<int>(i)) {
      s["index"].fail_graph("must be " + std::to_string(i) + " (stages are listed in order)");
    }
    const At names = s["nodes"];
    const At indices = s["node_indices"];
    names.expect_array();
    indices.expect_array();
    if (names.value.empty()) names.fail_graph("stage " + std::to_string(i) + " has no nodes");
    if (names.value.size() != indices.value.size()) {
      indices.fail_graph("has " + std::to_string(indices.value.size()) +
                         " entries but \"nodes\" has " + std::to_string(names.value.size()));
    }
    for (std::size_t k = 0; k < names.value.size(); ++k) {
      const int index = static_cast<int>(indices[k].as_int(0, kMaxIndex));
      info.nodes.push_back(index);
      assigned.emplace_back(index, names[k].as_string());
    }
    info.forward_ms = s["forward_ms"].as_finite_nonnegative();
    info.backward_ms = s["backward_ms"].as_finite_nonnegative();
    if (s.has("input_grad_ms")) info.input_grad_ms = s["input_grad_ms"].as_finite_nonnegative();
    if (s.has("weight_grad_ms")) info.weight_grad_ms = s["weight_grad_ms"].as_finite_nonnegative();
    info.param_bytes = s["param_bytes"].as_int(0, kMaxInt);
    info.activation_bytes = s["activation_bytes"].as_int(0, kMaxInt);
    info.output_bytes = s["output_bytes"].as_int(0, kMaxInt);
    info.memory_bytes = s["memory_bytes"].as_int(0, kMaxInt);
    info.in_flight_microbatches =
        static_cast<int>(s["in_flight_microbatches"].as_int(0, kMaxIndex));
    info.inputs = parse_values(s["inputs"]);
    info.outputs = parse_values(s["outputs"]);
    p.graph.stages.push_back(std::move(info));
  }

  // The node indices must be a permutation of 0..N-1; names by index give node_names.
  const std::size_t n = assigned.size();
  p.node_names.assign(n, std::string());
  p.node_stage.assign(n, -1);
  std::set<std::string> names_seen;
  for (const StageInfo& s : p.graph.stages) {
    for (int v : s.nodes) {
      PW_CHECK(static_cast<std::size_t>(v) < n && p.node_stage[static_cast<std::size_t>(v)] < 0,
               InvalidGraphError,
               json::where(doc.source, "/stages/" + std::to_string(s.index) + "/node_indices")
                   << ": node index " << v << " is out of range or assigned twice (" << n
                   << " nodes in all)");
      p.node_stage[static_cast<std::size_t>(v)] = s.index;
    }
  }
  for (const auto& [index, name] : assigned) {
    PW_CHECK(names_seen.insert(name).second, InvalidGraphError,
             json::where(doc.source, "/stages") << ": node name \"" << name << "\" appears twice");
    p.node_names[static_cast<std::size_t>(index)] = name;
  }
  auto check_value = [&](const StageValue& v, const std::string& where) {
    PW_CHECK(v.node >= -1 && v.node < static_cast<int>(n), InvalidGraphError,
             json::where(doc.source, where + "/node") << ": no node with index " << v.node);
  };
  for (const StageInfo& s : p.graph.stages) {
    const std::string base = "/stages/" + std::to_string(s.index);
    for (std::size_t k = 0; k < s.inputs.size(); ++k) {
      check_value(s.inputs[k], base + "/inputs/" + std::to_string(k));
    }
    for (std::size_t k = 0; k < s.outputs.size(); ++k) {
      check_value(s.outputs[k], base + "/outputs/" + std::to_string(k));
    }
  }

  const At cuts = at["cuts"];
  cuts.expect_array();
  for (std::size_t i = 0; i < cuts.value.size(); ++i) {
    const At c = cuts[i];
    c.only_keys({"producer_stage", "producer_output", "consumer_stage", "consumer_input", "bytes",
                 "producer_node", "consumer_node"});
    CutValue cut;
    cut.producer_stage = static_cast<int>(c["producer_stage"].as_int(-1, num_stages - 1));
    cut.consumer_stage = static_cast<int>(c["consumer_stage"].as_int(0, num_stages - 1));
    const StageInfo& consumer = p.graph.stages[static_cast<std::size_t>(cut.consumer_stage)];
    const std::size_t outputs =
        cut.producer_stage < 0
            ? 1
            : p.graph.stages[static_cast<std::size_t>(cut.producer_stage)].outputs.size();
    if (outputs == 0) c["producer_output"].fail_graph("the producer stage has no outputs");
    cut.producer_output =
        static_cast<int>(c["producer_output"].as_int(0, static_cast<std::int64_t>(outputs) - 1));
    if (consumer.inputs.empty()) c["consumer_input"].fail_graph("the consumer stage has no inputs");
    cut.consumer_input = static_cast<int>(
        c["consumer_input"].as_int(0, static_cast<std::int64_t>(consumer.inputs.size()) - 1));
    cut.bytes = c["bytes"].as_int(0, kMaxInt);
    cut.producer_node =
        static_cast<int>(c["producer_node"].as_int(-1, static_cast<std::int64_t>(n) - 1));
    cut.consumer_node =
        static_cast<int>(c["consumer_node"].as_int(0, static_cast<std::int64_t>(n) - 1));
    if (cut.producer_stage == cut.consumer_stage) {
      c["consumer_stage"].fail_graph("a cut value must connect two different stages");
    }
    p.graph.edges.push_back(cut);
  }
  PW_CHECK(
      !p.graph.has_cycle(), InvalidGraphError, json::where(doc.source, "/cuts") << ": " << [&] {
        try {
          (void)p.graph.topological_order();
        } catch (const InvalidGraphError& e) {
          return std::string(e.what());
        }
        return std::string("cycle");
      }());
  return p;
}

Partition load_partition(const std::string& path) {
  return parse_partition(json::read_text_file(path, "partition file", kMaxModelFileBytes), path);
}

void check_partition_matches(const Partition& partition, const Model& model,
                             const std::string& source_name) {
  PW_CHECK(partition.node_names.size() == model.nodes.size(), InvalidGraphError,
           source_name << " at /stages: the partition has " << partition.node_names.size()
                       << " nodes but model '" << model.name << "' has " << model.nodes.size());
  for (std::size_t i = 0; i < model.nodes.size(); ++i) {
    PW_CHECK(partition.node_names[i] == model.nodes[i].name, InvalidGraphError,
             source_name << " at /stages: node " << i << " is \"" << partition.node_names[i]
                         << "\" in the partition but \"" << model.nodes[i].name << "\" in model '"
                         << model.name << "'");
  }
  // The cut structure must be what this model's edges give for the same assignment.
  const StageGraph expected =
      build_stage_graph(model, partition.node_stage, partition.num_stages());
  for (std::size_t s = 0; s < expected.stages.size(); ++s) {
    const StageInfo& want = expected.stages[s];
    const StageInfo& got = partition.graph.stages[s];
    PW_CHECK(want.nodes == got.nodes && want.inputs == got.inputs && want.outputs == got.outputs,
             InvalidGraphError,
             source_name << " at /stages/" << s
                         << ": nodes, inputs or outputs differ from what model '" << model.name
                         << "' gives for this assignment (re-run pipewright partition)");
  }
  PW_CHECK(expected.edges == partition.graph.edges, InvalidGraphError,
           source_name << " at /cuts: the cut values differ from what model '" << model.name
                       << "' gives for this assignment (re-run pipewright partition)");
}

}  // namespace pipewright::graph
