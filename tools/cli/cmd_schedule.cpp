// `pipewright schedule NAME --pp P --microbatches M [--stages-per-rank V] [--lower] ...`:
// generates a torch-compatible schedule (sched::generate), optionally lowers it, and writes it as
// CSV (default; without --lower exactly torch's compute-only CSV), JSON, a text grid or dot.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::cli {
namespace {

struct ScheduleArgs {
  std::string name;
  int ranks = -1;  // -1: not given
  int microbatches = 0;
  int stages_per_rank = 0;  // 0: the schedule's own (2 for the V schedules, else 1)
  std::string edges;
  bool forward_only = false;
  bool lower = false;
  bool merge_iw = false;
  bool reduce_grad = false;
  bool optimizer_step = false;
  std::string format = "csv";
  std::string output = "-";
};

// "0:1,0:2,1:3" -> edges. Throws ConfigError naming the bad item.
std::vector<sched::StageEdge> parse_edges(const std::string& text) {
  std::vector<sched::StageEdge> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const auto colon = item.find(':');
    try {
      std::size_t used_a = 0;
      std::size_t used_b = 0;
      PW_CHECK(colon != std::string::npos, ConfigError, "");
      const int a = std::stoi(item.substr(0, colon), &used_a);
      const int b = std::stoi(item.substr(colon + 1), &used_b);
      PW_CHECK(used_a == colon && used_b == item.size() - colon - 1, ConfigError, "");
      out.push_back({a, b});
    } catch (const std::exception&) {
      throw ConfigError("--edges: cannot parse '" + item +
                        "'; expected comma-separated FROM:TO stage pairs, e.g. 0:1,0:2,1:3,2:3");
    }
    start = end + 1;
  }
  return out;
}

void run_schedule(const ScheduleArgs& args) {
  sched::ScheduleSpec spec;
  spec.kind = sched::parse_schedule_kind(args.name);
  spec.ranks = args.ranks;
  spec.microbatches = args.microbatches;
  const int required = sched::required_stages_per_rank(spec.kind);
  PW_CHECK(args.stages_per_rank != 0 || required != 0, ConfigError,
           args.name << " needs --stages-per-rank V: the stages each rank holds (e.g. -v 2; with "
                        "V = 1 it is a plain 1F1B-style order)");
  spec.stages_per_rank = args.stages_per_rank != 0 ? args.stages_per_rank : required;
  spec.forward_only = args.forward_only;
  if (!args.edges.empty()) spec.stage_edges = parse_edges(args.edges);
  const sched::ComputePlan plan = sched::generate(spec);
  // Generators are tested to produce valid plans; checking again keeps a bug from reaching a run.
  sched::check_valid(plan, std::string(sched::to_string(spec.kind)));
  std::string text;
  if (args.lower) {
    sched::LowerOptions opt;
    opt.merge_iw = args.merge_iw;
    opt.reduce_grad = args.reduce_grad;
    opt.optimizer_step = args.optimizer_step;
    const sched::LoweredPlan lowered = sched::lower(plan, opt);
    if (args.format == "csv") text = sched::to_csv(lowered);
    if (args.format == "torch-comms") text = sched::to_torch_comms_csv(lowered);
    if (args.format == "json") text = sched::to_json(lowered);
    if (args.format == "text") text = sched::to_text_grid(lowered);
    if (args.format == "dot") text = sched::to_dot(lowered);
  } else {
    PW_CHECK(!args.merge_iw && !args.reduce_grad && !args.optimizer_step, ConfigError,
             "--merge-iw, --reduce-grad and --optimizer-step are lowering options; add --lower");
    PW_CHECK(args.format != "torch-comms", ConfigError,
             "--format torch-comms is torch's compute_comms CSV, a lowered plan; add --lower");
    if (args.format == "csv") text = sched::to_csv(plan);
    if (args.format == "json") text = sched::to_json(plan);
    if (args.format == "text") text = sched::to_text_grid(plan);
    if (args.format == "dot") text = sched::to_dot(plan);
  }
  write_output(args.output, text);
  if (args.output != "-") spdlog::info("wrote {} ({})", args.output, args.format);
}

void setup_schedule(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  auto* cmd = app.add_subcommand(
      "schedule", "Generate a pipeline schedule (torch.distributed.pipelining's orders)");
  cmd->add_option("name", args->name,
                  "GPipe | 1F1B | Interleaved1F1B | LoopedBFS | InterleavedZeroBubble | "
                  "ZBVZeroBubble | DualPipeV | Chimera (case-insensitive)")
      ->required();
  cmd->add_option("-p,--pp", args->ranks, "pipeline ranks P (required)");
  add_deprecated_option(cmd, "--ranks", "--pp", [args](const std::string& v) {
    args->ranks = parse_int_flag(v, "--ranks");
  });
  cmd->add_option("-m,--microbatches", args->microbatches, "microbatches M")->required();
  cmd->add_option("-v,--stages-per-rank", args->stages_per_rank,
                  "stages per pipeline rank V (stage s on rank s mod P); required by the looped "
                  "schedules Interleaved1F1B, LoopedBFS, InterleavedZeroBubble; default 2 for "
                  "ZBVZeroBubble, DualPipeV, else 1");
  cmd->add_flag("--forward-only", args->forward_only,
                "inference plan: forwards only (GPipe/1F1B: torch's _ScheduleForwardOnly)");
  cmd->add_option("--edges", args->edges,
                  "stage DAG as FROM:TO pairs, e.g. 0:1,0:2,1:3,2:3 (GPipe, 1F1B); default chain");
  cmd->add_flag("--lower", args->lower, "insert SEND/RECV between ranks (compute+comm plan)");
  cmd->add_flag("--merge-iw", args->merge_iw, "with --lower: merge adjacent I+W into B");
  cmd->add_flag("--reduce-grad", args->reduce_grad,
                "with --lower: REDUCE_GRAD after each stage's last backward");
  cmd->add_flag("--optimizer-step", args->optimizer_step,
                "with --lower: OPTIM per stage at the end of each rank");
  cmd->add_option("-f,--format", args->format,
                  "csv | torch-comms (with --lower: torch's compute_comms CSV) | json | text | dot")
      ->check(CLI::IsMember({"csv", "torch-comms", "json", "text", "dot"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "output file (default: stdout)");
  cmd->callback([args] {
    PW_CHECK(args->ranks != -1, ConfigError, "--pp P (pipeline ranks) is required");
    run_schedule(*args);
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_schedule);

}  // namespace pipewright::cli
