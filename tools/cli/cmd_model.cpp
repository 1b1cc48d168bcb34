// `pipewright model gpt|mlp ...`: writes a model description JSON (docs/model-format.md) from the
// GPT or MLP generator (graph/generators.hpp).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/render.hpp"

namespace pipewright::cli {
namespace {

// "8,16,2" -> {8, 16, 2}. Throws ConfigError naming the bad item.
std::vector<std::int64_t> parse_sizes(const std::string& text) {
  return parse_int_list(text, "--sizes", "comma-separated integers, e.g. 8,16,2",
                        std::numeric_limits<std::int64_t>::min());
}

void log_summary(const graph::Model& model, const std::string& output) {
  double fwd = 0.0, bwd = 0.0;
  std::int64_t params = 0;
  for (const graph::Node& n : model.nodes) {
    fwd += n.cost.forward_ms;
    bwd += n.cost.backward_ms;
    params += n.cost.param_bytes;
  }
  spdlog::info(
      "model '{}': {} nodes, parameters {}, forward {:.4g} ms, backward {:.4g} ms per "
      "microbatch of {}",
      model.name, model.nodes.size(), graph::human_bytes(params), fwd, bwd, model.micro_batch_size);
  if (output != "-") spdlog::info("wrote {}", output);
}

struct GptArgs {
  graph::GptSpec spec;
  std::string output = "-";
};

struct MlpArgs {
  std::string sizes;
  std::string activation = "relu";
  graph::MlpSpec spec;
  bool no_bias = false;
  std::string output = "-";
};

void add_device_options(CLI::App* cmd, graph::DeviceModel& device) {
  cmd->add_option("--device-tflops", device.tflops,
                  "roofline: sustained compute, TFLOP/s (default A100-class bf16)")
      ->capture_default_str();
  cmd->add_option("--device-gbps", device.gbps,
                  "roofline: sustained memory bandwidth, GB/s (default A100-class HBM)")
      ->capture_default_str();
}

void setup_model(CLI::App& app) {
  auto* cmd = app.add_subcommand("model", "Generate a model description (JSON) with costs");
  cmd->require_subcommand(1, 1);

  auto gpt = std::make_shared<GptArgs>();
  auto* g = cmd->add_subcommand(
      "gpt", "GPT: embedding, L transformer blocks, final layernorm, linear head; Megatron FLOPs");
  g->add_option("--layers,-l", gpt->spec.layers, "transformer blocks L")->required();
  g->add_option("--hidden", gpt->spec.hidden, "hidden size H")->required();
  g->add_option("--heads", gpt->spec.heads, "attention heads A (H % A == 0)")->required();
  g->add_option("--seq", gpt->spec.seq, "sequence length S")->required();
  g->add_option("--vocab", gpt->spec.vocab, "vocabulary size V")->capture_default_str();
  g->add_option("--micro-batch-size,-b", gpt->spec.micro_batch_size, "micro batch B")
      ->capture_default_str();
  g->add_option("--bytes-per-element", gpt->spec.bytes_per_element,
                "bytes per parameter/activation element (2: mixed precision)")
      ->capture_default_str();
  add_device_options(g, gpt->spec.device);
  g->add_option("-o,--output", gpt->output, "output file (default: stdout)");
  g->callback([gpt] {
    const graph::Model model = graph::make_gpt(gpt->spec);
    write_output(gpt->output, graph::to_json(model));
    log_summary(model, gpt->output);
  });

  auto mlp = std::make_shared<MlpArgs>();
  auto* m = cmd->add_subcommand(
      "mlp", "MLP in torch.nn.Sequential order: Linear, act, Linear, ..., Linear");
  m->add_option("--sizes", mlp->sizes, "layer sizes, e.g. 8,16,2 = Linear(8,16), act, Linear(16,2)")
      ->required();
  m->add_option("--activation", mlp->activation, "relu | gelu")
      ->check(CLI::IsMember({"relu", "gelu"}))
      ->capture_default_str();
  m->add_option("--micro-batch-size,-b", mlp->spec.micro_batch_size, "micro batch B")
      ->capture_default_str();
  m->add_flag("--no-bias", mlp->no_bias, "Linear layers without bias");
  add_device_options(m, mlp->spec.device);
  m->add_option("-o,--output", mlp->output, "output file (default: stdout)");
  m->callback([mlp] {
    graph::MlpSpec spec = mlp->spec;
    spec.sizes = parse_sizes(mlp->sizes);
    spec.activation = mlp->activation == "gelu" ? graph::NodeKind::kGelu : graph::NodeKind::kRelu;
    spec.bias = !mlp->no_bias;
    const graph::Model model = graph::make_mlp(spec);
    write_output(mlp->output, graph::to_json(model));
    log_summary(model, mlp->output);
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_model);

}  // namespace pipewright::cli
