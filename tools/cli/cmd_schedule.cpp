// `pipewright schedule NAME --pp P --microbatches M [--stages-per-rank V] [--lower] ...`:
// generates a torch-compatible schedule (sched::generate), optionally lowers it, and writes it as
// CSV (default; without --lower exactly torch's compute-only CSV), JSON, a text grid or dot.
// `pipewright schedule Auto ... --memory-limit X | --max-inflight K` with costs (--profile,
// --model, or what-if --forward-ms ...) synthesizes the plan instead (sim::synthesize, Note [Auto
// method] in sim/synthesis.hpp) and writes it the same way.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/synthesis.hpp"

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
  // Auto only: the cap, the costs, the search's budget.
  std::string memory_limit;
  std::optional<double> max_inflight;
  std::optional<double> time_limit_s;
  std::string objective = "step";
  std::vector<double> weight_grad_keeps;
  std::string optimizer = "sgd";
  sim::CostSources costs;
  std::string activation_bytes = "0", param_bytes = "0", output_bytes = "0";
  std::optional<double> p2p_ms;
  std::string model_path, partition_path, cluster_file;
};

bool is_auto(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "auto";
}

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

void write_plan(const ScheduleArgs& args, const sched::ComputePlan& plan) {
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

// `schedule Auto`: the costs from one source, the cap, then sim::synthesize.
void run_auto(const ScheduleArgs& args) {
  PW_CHECK(args.edges.empty() && !args.forward_only, ConfigError,
           "Auto synthesizes training plans over a chain of stages: --edges and --forward-only "
           "are not supported");
  PW_CHECK(args.memory_limit.empty() || !args.max_inflight, ConfigError,
           "give one cap: --memory-limit (bytes) or --max-inflight (microbatches), not both");
  const std::int32_t v = args.stages_per_rank != 0 ? args.stages_per_rank : 1;
  sim::AutoOptions o;
  o.ranks = args.ranks;
  o.microbatches = args.microbatches;
  o.stages_per_rank = v;
  if (!args.memory_limit.empty())
    o.memory_limit_bytes = parse_size(args.memory_limit, "--memory-limit");
  o.max_inflight = args.max_inflight;
  o.time_limit_s = args.time_limit_s;
  o.objective = args.objective == "span" ? sim::AutoObjective::kSpan : sim::AutoObjective::kStep;
  o.memory.optimizer = sched::parse_optimizer(args.optimizer);
  o.sim.p2p_override_ms = args.p2p_ms;
  if (!args.cluster_file.empty()) o.cluster = sim::load_cluster(args.cluster_file);

  sim::CostSources sources = args.costs;
  sources.what_if.activation_bytes = parse_size(args.activation_bytes, "--activation-bytes", 0);
  sources.what_if.param_bytes = parse_size(args.param_bytes, "--param-bytes", 0);
  sources.what_if.output_bytes = parse_size(args.output_bytes, "--output-bytes", 0);
  std::optional<graph::Model> model;
  std::optional<graph::Partition> partition;
  if (!args.model_path.empty()) {
    sched::JobSpec job;
    job.pp = args.ranks;
    job.stages_per_rank = v;
    job.model_path = args.model_path;
    job.partition_path = args.partition_path;
    model = graph::load_model(args.model_path);
    partition = sched::resolve_partition(job, *model);
    sources.model = &*model;
    sources.partition = &*partition;
  } else {
    PW_CHECK(args.partition_path.empty(), ConfigError, "--partition needs --model");
  }
  PW_CHECK(sources.given() == 1, ConfigError,
           "Auto needs the stage costs from one source: --profile FILE, --model FILE (with "
           "--partition), or what-if --forward-ms/--backward-ms [--weight-ms]");
  // The table as given: its stage count is checked against P x V by synthesize.
  sched::PlanShape shape;
  shape.ranks = args.ranks;
  shape.stages = args.ranks * v;
  shape.microbatches = args.microbatches;
  shape.stage_to_rank = sched::looping_placement(shape.ranks, shape.stages);
  sched::CostTable costs;
  if (!sources.profile_path.empty()) {
    costs = sched::load_costs(sources.profile_path);
    PW_CHECK(static_cast<std::int64_t>(costs.stages.size()) == shape.stages, ConfigError,
             sources.profile_path << ": the profile has " << costs.stages.size()
                                  << " stage(s) but the plan has P x V = " << args.ranks << " x "
                                  << v << " = " << shape.stages
                                  << " stages (--pp, --stages-per-rank)");
  } else {
    costs = sim::stage_costs(sources, shape);
  }
  if (args.costs.compute_overhead_ms) costs.compute_overhead_ms = *args.costs.compute_overhead_ms;
  sim::set_weight_grad_keeps(costs, args.weight_grad_keeps);

  const sim::AutoResult r = sim::synthesize(costs, o);
  sched::check_valid(r.plan, "Auto");
  if (r.timed_out) spdlog::warn("Auto: {}", r.note);
  for (const auto& c : r.candidates) {  // --log-level debug: every candidate
    if (c.fits) {
      spdlog::debug("Auto candidate {}: step {:.3f} ms, bubble rate {:.2f}%", c.name,
                    static_cast<double>(c.step_ns) / 1e6, 100 * c.span_bubble);
    } else {
      spdlog::debug("Auto candidate {}: not taken: {}", c.name, c.why_not);
    }
  }
  std::string peaks;
  for (std::size_t k = 0; k < r.peak_activation.size(); ++k) {
    peaks += fmt::format("{}{:g}/{:g}", peaks.empty() ? "" : " ", r.peak_activation[k],
                         r.activation_cap[k]);
  }
  const auto fit = std::count_if(r.candidates.begin(), r.candidates.end(),
                                 [](const sim::AutoCandidate& c) { return c.fits; });
  spdlog::info(
      "Auto: {} candidates ({} fit), chose {}: simulated step {:.3f} ms (lower bound {:.3f} ms), "
      "bubble rate {:.2f}% (span, the Zero Bubble paper's), idle share {:.2f}% (counts the first "
      "wait); activation held/cap per rank: {}",
      r.candidates.size(), fit, r.chosen, static_cast<double>(r.step_ns) / 1e6,
      static_cast<double>(r.lower_bound_ns) / 1e6, 100 * r.span_bubble, 100 * r.idle_share, peaks);
  write_plan(args, r.plan);
}

void run_schedule(const ScheduleArgs& args) {
  if (is_auto(args.name)) {
    run_auto(args);
    return;
  }
  PW_CHECK(args.memory_limit.empty() && !args.max_inflight && !args.time_limit_s &&
               args.costs.given() == 0 && args.model_path.empty() &&
               args.weight_grad_keeps.empty() && args.objective == "step",
           ConfigError,
           "--memory-limit, --max-inflight, --time-limit, --objective and the cost options are for "
           "`schedule Auto`; "
               << args.name << " is a fixed schedule");
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
  write_plan(args, plan);
}

void setup_schedule(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  auto* cmd = app.add_subcommand(
      "schedule", "Generate a pipeline schedule (torch.distributed.pipelining's orders)");
  cmd->add_option("name", args->name,
                  "GPipe | 1F1B | Interleaved1F1B | LoopedBFS | InterleavedZeroBubble | "
                  "ZBVZeroBubble | DualPipeV | Chimera | ZBH2, or Auto (synthesized for the "
                  "costs under a memory cap; case-insensitive)")
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
  const char* g = "Auto (schedule synthesis)";
  cmd->add_option("--memory-limit", args->memory_limit,
                  "per-rank device memory (bytes or a size such as 16GiB), compared with the "
                  "memory model's peak (parameters, gradients, optimizer state, activations)")
      ->group(g);
  cmd->add_option("--max-inflight", args->max_inflight,
                  "per-rank cap in microbatches' activations (P: ZB-H1's memory, 2P: the "
                  "Zero Bubble paper's ZB-2p)")
      ->group(g);
  cmd->add_option("--objective", args->objective,
                  "step: the shortest simulated step (pipewright's executor syncs every step); "
                  "span: the longest per-rank span, the Zero Bubble paper's cost")
      ->check(CLI::IsMember({"step", "span"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--weight-grad-keeps", args->weight_grad_keeps,
                  "share of a stage's activation W still needs after I (I frees the rest; "
                  "one value or one per stage; default 1, or the profile's)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--time-limit", args->time_limit_s,
                  "seconds for the search; then the best plan so far, with a note")
      ->group(g);
  cmd->add_option("--optimizer", args->optimizer,
                  "with --memory-limit: the optimizer whose state the memory model counts")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--forward-ms", args->costs.what_if.forward_ms,
                  "what-if: F per stage (one value or one per stage)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--backward-ms", args->costs.what_if.backward_ms,
                  "what-if: full backward B = I + W per stage")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--weight-ms", args->costs.what_if.weight_ms,
                  "what-if: W part of B (I = B - W; default B / 2)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--activation-bytes", args->activation_bytes,
                  "what-if: activation kept per microbatch per stage (size)")
      ->group(g);
  cmd->add_option("--param-bytes", args->param_bytes, "what-if: parameters per stage (size)")
      ->group(g);
  cmd->add_option("--output-bytes", args->output_bytes, "what-if: each message (size)")->group(g);
  cmd->add_option("--profile", args->costs.profile_path,
                  "executor profile (pipewright-profile JSON) with P x V stages")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--model", args->model_path, "model JSON (costs from its partition)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--partition", args->partition_path,
                  "partition JSON of --model (default: balanced into P x V stages)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--p2p-ms", args->p2p_ms, "fixed time per point-to-point message")->group(g);
  cmd->add_option("--compute-overhead-ms", args->costs.compute_overhead_ms,
                  "fixed overhead added to every F/I/W")
      ->group(g);
  cmd->add_option("--cluster", args->cluster_file, "cluster JSON (pipewright-cluster)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->callback([args] {
    PW_CHECK(args->ranks != -1, ConfigError, "--pp P (pipeline ranks) is required");
    run_schedule(*args);
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_schedule);

}  // namespace pipewright::cli
