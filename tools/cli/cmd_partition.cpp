// `pipewright partition MODEL --stages N --method uniform|balanced|memory [--memory-limit B]`:
// cuts a model into pipeline stages (graph/partition.hpp) and writes the partition JSON
// (docs/partitioning.md); logs one line per stage. `--layout STRING [--pp P]` takes the stages
// from a Megatron-Core layout string instead (graph/layout.hpp).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/layout.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/graph/render.hpp"
#include "pipewright/sched/training.hpp"
#include "pipewright/sim/parallel_model.hpp"

namespace pipewright::cli {
namespace {

struct PartitionArgs {
  std::string model;
  int stages = 0;
  std::string method = "balanced";
  std::string memory_limit;
  std::string in_flight = "1f1b";
  std::string recompute = "none";
  std::string precision = "fp32";
  graph::PartitionOptions options;
  std::string output = "-";
  std::string layout;  // Megatron-Core layout string (graph/layout.hpp)
  int pp = 1;
  int zero_stage = 0;  // issue 43: the static state a stage keeps (Note [Sharded state])
  int dp = 1;
  int tp = 1;  // issue 46: the per-GPU model of a tensor-parallel group (sim/parallel_model.hpp)
  bool sequence_parallel = false;
};

void run_partition(const PartitionArgs& args) {
  graph::PartitionOptions options = args.options;
  options.stages = args.stages;
  options.method = *graph::parse_partition_method(args.method);
  if (!args.memory_limit.empty())
    options.memory_limit_bytes = parse_size(args.memory_limit, "--memory-limit");
  if (args.in_flight != "1f1b") {
    std::size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(args.in_flight, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PW_CHECK(used == args.in_flight.size() && used > 0 && n >= 1, ConfigError,
             "--in-flight: expected 1f1b or an integer >= 1, got '" << args.in_flight << "'");
    options.in_flight_microbatches = n;
  }
  PW_CHECK(args.recompute == "none" || args.recompute == "selective" || args.recompute == "full",
           ConfigError,
           "--recompute: partition takes none, selective or full, got '" << args.recompute << "'");
  options.recompute = args.recompute == "full";
  // Note [Sharded state] (sched/memory.hpp) as the partitioner's per-parameter-byte factors
  // (memory = params x (1 + gradients + optimizer) + activations): ZeRO-1 shards the optimizer
  // state; ZeRO-2 also the gradients, holding one backward's full gradients on top; ZeRO-3 also
  // the parameters, a stage's gathered ones (the leading 1) and one backward's full gradients
  // held while it computes.
  PW_CHECK(args.zero_stage >= 0 && args.zero_stage <= 3, ConfigError,
           "--zero-stage must be 0, 1, 2 or 3, got " << args.zero_stage);
  PW_CHECK(args.dp >= 1, ConfigError, "--dp must be >= 1, got " << args.dp);
  if (args.zero_stage > 0 && args.dp > 1) {
    const double d = args.dp;
    const double g = options.gradient_bytes_per_param_byte;
    const double o = options.optimizer_bytes_per_param_byte;
    switch (args.zero_stage) {
      case 1:
        options.optimizer_bytes_per_param_byte = o / d;
        break;
      case 2:
        options.gradient_bytes_per_param_byte = g + g / d;
        options.optimizer_bytes_per_param_byte = o / d;
        break;
      default:
        options.gradient_bytes_per_param_byte = g + (1 + g + o) / d;
        options.optimizer_bytes_per_param_byte = 0;
        break;
    }
  }
  // Note [Stage memory]: bf16/fp16 keep 16-bit activations but for their autocast fp32 part
  // (and autocast's parameter copies).
  options.activation_element_bytes = sched::element_bytes(sched::parse_precision(args.precision));
  graph::Model model = graph::load_model(args.model);
  if (args.tp > 1 || args.sequence_parallel || args.recompute == "selective") {
    // One GPU of the TP group: its compute, parameters and activations (the TP collectives are
    // timed by simulate with a cluster; here, without one, they are free). Selective recompute:
    // each block keeps Korthikanti's activations without the attention core and re-runs it in
    // the backward (Note [Tensor parallelism as costs]).
    sim::ParallelModelSpec ps;
    ps.tp = args.tp;
    ps.sequence_parallel = args.sequence_parallel;
    if (args.recompute == "selective") ps.recompute = sim::LayerRecompute::kSelective;
    model = sim::parallelize_model(model, ps);
  }
  PW_CHECK(args.tp >= 1, ConfigError, "--tp must be >= 1, got " << args.tp);
  graph::Partition partition;
  if (!args.layout.empty()) {
    partition = graph::layout_partition(
        model, graph::parse_megatron_layout(args.layout, "--layout", graph::layout_limit(model)),
        args.pp, options);
    PW_CHECK(
        args.stages == 0 || args.stages == partition.num_stages(), ConfigError,
        "--stages " << args.stages << " but --layout has " << partition.num_stages() << " stages");
  } else {
    PW_CHECK(args.stages != 0, ConfigError, "--stages N (or --layout) is required");
    partition = graph::partition_model(model, options);
  }
  write_output(args.output, graph::to_json(partition));
  spdlog::info("{} partition of '{}' into {} stages: slowest stage {:.4g} ms (fwd+bwd)",
               partition.method, model.name, partition.num_stages(), partition.max_stage_ms());
  for (const graph::StageInfo& s : partition.graph.stages) {
    spdlog::info(
        "  stage {}: {} nodes ({} .. {}), fwd {:.4g} ms, bwd {:.4g} ms, memory {} "
        "({} in flight{}), sends {}",
        s.index, s.nodes.size(), model.nodes[static_cast<std::size_t>(s.nodes.front())].name,
        model.nodes[static_cast<std::size_t>(s.nodes.back())].name, s.forward_ms, s.backward_ms,
        graph::human_bytes(s.memory_bytes), s.in_flight_microbatches,
        partition.recompute ? ", recompute" : "",
        graph::human_bytes(s.output_bytes * options.activation_element_bytes / 4));
  }
  if (args.output != "-") spdlog::info("wrote {}", args.output);
}

void setup_partition(CLI::App& app) {
  auto args = std::make_shared<PartitionArgs>();
  auto* cmd = app.add_subcommand("partition", "Cut a model into pipeline stages");
  cmd->add_option("model,--model", args->model, "model JSON (pipewright model ... -o MODEL)")
      ->required();
  cmd->add_option("-s,--stages", args->stages, "number of stages (or --layout)");
  cmd->add_option("--layout", args->layout,
                  "layout of Megatron-Core, e.g. \"Et*3|(tt|)*29,m|L\": E embedding, t decoder "
                  "layer, m MTP layer, L loss, | stage end, x*N and (...)*N repeat "
                  "(docs/interop.md)");
  cmd->add_option("-p,--pp", args->pp,
                  "with --layout: pipeline ranks (it must divide the layout's stages; V = stages "
                  "/ pp)")
      ->capture_default_str();
  cmd->add_option("--method", args->method,
                  "uniform (equal node counts) | balanced (minimise the slowest stage) | memory "
                  "(balanced under --memory-limit)")
      ->check(CLI::IsMember({"uniform", "balanced", "memory"}))
      ->capture_default_str();
  cmd->add_option("--memory-limit", args->memory_limit,
                  "memory per stage for --method memory: bytes or a size such as 80GB, 74.5GiB");
  cmd->add_option("--in-flight", args->in_flight,
                  "microbatches whose activations a stage holds: 1f1b (stage s of p: p - s) or "
                  "a number for every stage (GPipe: the microbatch count)")
      ->capture_default_str();
  cmd->add_option(
         "--recompute", args->recompute,
         "none | selective (each transformer block keeps its activations without the attention "
         "core and redoes it in the backward) | full: every stage recomputes its activations in "
         "the backward, so it "
         "keeps only its inputs per in-flight microbatch (docs/partitioning.md)")
      ->capture_default_str();
  cmd->add_option("--precision", args->precision,
                  "fp32 | bf16 | fp16: activations (and autocast's parameter copies) at 16 bits "
                  "under bf16/fp16, but for what autocast keeps in fp32 (layer norms' inputs, "
                  "token ids, the loss: docs/partitioning.md); parameters, gradients and "
                  "optimizer state stay fp32")
      ->capture_default_str();
  cmd->add_option("--optimizer-bytes-per-param-byte", args->options.optimizer_bytes_per_param_byte,
                  "optimizer state per parameter byte (Adam: 2)")
      ->capture_default_str();
  cmd->add_option("--gradient-bytes-per-param-byte", args->options.gradient_bytes_per_param_byte,
                  "gradient bytes per parameter byte")
      ->capture_default_str();
  cmd->add_option("--zero-stage", args->zero_stage,
                  "with --dp: the state a stage keeps over its replicas (docs/data-parallel.md, "
                  "\"Sharded data parallelism\"): 0 whole | 1 optimizer state sharded | 2 also "
                  "gradients | 3 also parameters")
      ->capture_default_str();
  cmd->add_option("--tp", args->tp,
                  "tensor-parallel size: partition the model one GPU of a TP group runs "
                  "(compute, parameters and activations split as Megatron-LM does)")
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", args->sequence_parallel,
                "with --tp > 1: Megatron's sequence parallelism (activations / tp)");
  cmd->add_option("--dp", args->dp, "data-parallel replicas of each stage (for --zero-stage)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "output file (default: stdout)");
  cmd->callback([args] { run_partition(*args); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_partition);

}  // namespace pipewright::cli
