// `pipewright render MODEL [--partition P] [--stages-only] -o FILE.dot|.svg|.png`: draws the model
// DAG (one cluster per stage) or the stage graph (graph/render.hpp, docs/rendering.md).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <limits>
#include <memory>
#include <string>

#include "commands.hpp"
#include "flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/graph/render.hpp"

namespace pipewright::cli {
namespace {

struct RenderArgs {
  std::string model;
  std::string partition;
  bool stages_only = false;
  std::string format;
  std::string stage_to_rank;
  std::string output;
  graph::RenderOptions options;  // --rankdir, --collapse
};

std::vector<int> parse_ranks(const std::string& text, int stages) {
  std::vector<int> out;
  for (const std::int64_t r :
       parse_int_list(text, "--stage-to-rank", "ranks >= 0, e.g. 0,1,0,1", 0)) {
    PW_CHECK(r <= std::numeric_limits<int>::max(), ConfigError,
             "--stage-to-rank: rank " << r << " is out of range");
    out.push_back(static_cast<int>(r));
  }
  PW_CHECK(static_cast<int>(out.size()) == stages, ConfigError,
           "--stage-to-rank has " << out.size() << " entries for " << stages << " stages");
  return out;
}

void run_render(const RenderArgs& args) {
  std::optional<graph::ImageFormat> format;
  if (args.format.empty()) {
    format = graph::image_format_for_path(args.output);
    PW_CHECK(format.has_value(), ConfigError,
             "-o " << args.output
                   << ": cannot tell the format from the extension; use .dot, .svg or .png, or "
                      "--format dot|svg|png");
  } else {
    format = graph::image_format_for_path("x." + args.format);
  }
  // Fail before any work if the image cannot be produced.
  if (*format != graph::ImageFormat::kDot && !graph::graphviz_available()) {
    (void)graph::render_image("", *format);  // throws the explanatory ConfigError
  }
  const graph::Model model = graph::load_model(args.model);
  std::optional<graph::Partition> partition;
  if (!args.partition.empty()) {
    partition = graph::load_partition(args.partition);
    graph::check_partition_matches(*partition, model, args.partition);
  }
  PW_CHECK(!args.stages_only || partition.has_value(), ConfigError,
           "--stages-only needs --partition P");
  graph::RenderOptions options = args.options;
  if (!args.stage_to_rank.empty()) {
    PW_CHECK(partition.has_value(), ConfigError, "--stage-to-rank needs --partition P");
    options.stage_to_rank = parse_ranks(args.stage_to_rank, partition->num_stages());
  }
  const std::string dot =
      args.stages_only ? graph::render_stages_dot(model, *partition, options)
                       : graph::render_model_dot(model, partition ? &*partition : nullptr, options);
  write_output(args.output, graph::render_image(dot, *format));
  spdlog::info("wrote {}", args.output);
}

void setup_render(CLI::App& app) {
  auto args = std::make_shared<RenderArgs>();
  auto* cmd = app.add_subcommand(
      "render", "Draw a model (one Graphviz cluster per stage) or its stage graph");
  cmd->add_option("model,--model", args->model, "model JSON")->required();
  cmd->add_option("--partition", args->partition, "partition JSON (pipewright partition)");
  // -p is --pp in every other subcommand.
  add_deprecated_option(cmd, "-p", "--partition",
                        [args](const std::string& v) { args->partition = v; });
  cmd->add_flag("--stages-only", args->stages_only, "draw stages and cut values, not nodes");
  cmd->add_option("--stage-to-rank", args->stage_to_rank,
                  "colour by rank: rank of each stage, e.g. 0,1,0,1 (default: stage s on rank s)");
  cmd->add_option("--rankdir", args->options.rankdir,
                  "TB (top to bottom) or LR (left to right: deep models as a row)")
      ->capture_default_str();
  cmd->add_flag("--collapse", args->options.collapse,
                "fold runs of identical chained nodes (\"block0 .. block31, x 32\")");
  cmd->add_option("-f,--format", args->format, "dot | svg | png (default: from -o's extension)")
      ->check(CLI::IsMember({"dot", "svg", "png"}));
  cmd->add_option("-o,--output", args->output,
                  "output file: .dot (always), .svg/.png (needs a Graphviz build)")
      ->required();
  cmd->callback([args] { run_render(*args); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_render);

}  // namespace pipewright::cli
