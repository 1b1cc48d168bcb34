// Plans in and out of the ecosystem (docs/interop.md):
//   `pipewright export-chakra [PLAN] [job flags] [--profile F] [--cluster C] -o DIR`
//       one Chakra execution trace per rank (sim/chakra.hpp), DIR/<prefix>.<rank>.et, and the
//       data-parallel communicator groups, DIR/<prefix>.comm_groups.json;
//   `pipewright import-chakra DIR [-f json|csv|torch-comms] [-o FILE]`
//       the plan such traces hold;
//   `pipewright convert PLAN -f json|csv|torch-comms [-o FILE]`
//       a plan file (CSV, torch's compute_comms CSV, JSON) in another of those formats.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "job_flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/file_io.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sim/chakra.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/parallel_model.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::cli {
namespace {

namespace fs = std::filesystem;

// A Chakra trace of a pipeline stays far below this; the limit keeps a stray file from being
// read whole (issue 20, item 7).
constexpr std::size_t kMaxTraceBytes = std::size_t{1} << 30;

const char* const kPlanFormats = "json | csv | torch-comms";

std::string plan_text(const sched::AnyPlan& plan, const std::string& format) {
  if (format == "json") {
    return std::visit([](const auto& p) { return sched::to_json(p); }, plan);
  }
  if (format == "csv") {
    return std::visit([](const auto& p) { return sched::to_csv(p); }, plan);
  }
  PW_CHECK(sched::is_lowered(plan), ConfigError,
           "--format torch-comms is torch's compute_comms CSV, a lowered plan; this plan is "
           "compute-only (write it as csv, torch's compute_only CSV)");
  return sched::to_torch_comms_csv(std::get<sched::LoweredPlan>(plan));
}

void write_plan(const sched::AnyPlan& plan, const std::string& format, const std::string& out) {
  write_output(out, plan_text(plan, format));
  if (out != "-") spdlog::info("wrote {} ({})", out, format);
}

// The traces of DIR: <prefix>.<rank>.et for ranks 0, 1, ... (ASTRA-sim's naming), in rank order.
std::vector<sim::ChakraFile> read_traces(const std::string& dir) {
  PW_CHECK(fs::is_directory(dir), InputError,
           dir << ": not a directory (import-chakra reads a folder of <prefix>.<rank>.et files)");
  std::map<long, std::string> by_rank;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path& p = entry.path();
    if (p.extension() != ".et") continue;
    const std::string stem = p.stem().string();  // <prefix>.<rank>
    const auto dot = stem.rfind('.');
    const std::string digits = dot == std::string::npos ? stem : stem.substr(dot + 1);
    PW_CHECK(!digits.empty() && digits.size() < 9 &&
                 digits.find_first_not_of("0123456789") == std::string::npos,
             InputError, p.string() << ": a trace must be named <prefix>.<rank>.et");
    const long rank = std::stol(digits);
    PW_CHECK(
        by_rank.emplace(rank, p.string()).second, InputError,
        p.string() << ": a second trace of rank " << rank << " (also " << by_rank[rank] << ")");
  }
  PW_CHECK(!by_rank.empty(), InputError, dir << ": no <prefix>.<rank>.et traces");
  std::vector<sim::ChakraFile> files;
  for (const auto& [rank, path] : by_rank) {
    PW_CHECK(
        rank == static_cast<long>(files.size()), InputError,
        dir << ": the trace of rank " << files.size() << " is missing (next is " << path << ")");
    files.push_back({path, json::read_text_file(path, "Chakra trace", kMaxTraceBytes)});
  }
  return files;
}

struct ExportArgs {
  sched::JobSpec job;
  std::string plan_file;
  sim::CostSources costs;
  std::string cluster_file;
  std::string output;
  std::string prefix = "pipewright";
};

void run_export(const ExportArgs& a) {
  sim::Cluster cluster;
  if (!a.cluster_file.empty()) cluster = sim::load_cluster(a.cluster_file);
  // With --tp each trace is one GPU of a TP group (its collectives inside its compute nodes'
  // durations: Note [Tensor parallelism as costs]).
  const ResolvedJob r = resolve_job(a.job, a.plan_file, &cluster);
  cluster = sim::tp_cluster(cluster, r.job.tp);
  const sched::LoweredPlan& plan = r.plan;
  sim::CostSources sources = a.costs;
  sources.model = r.model ? &*r.model : nullptr;
  sources.partition = r.partition ? &*r.partition : nullptr;
  sources.precision = r.job.precision;  // a profile of another precision is refused, as simulate
  const sched::CostTable costs = sim::stage_costs(sources, plan.shape);
  // Note [Chakra tensor parallelism]: one trace per GPU, Megatron's collectives as nodes.
  sim::ChakraTensorParallel tensor;
  tensor.tp = r.job.tp;
  tensor.sequence_parallel = r.job.sequence_parallel;
  if (r.job.tp > 1 && r.model && r.partition) {
    sim::ParallelModelSpec ps;
    ps.tp = r.job.tp;
    ps.sequence_parallel = r.job.sequence_parallel;
    ps.element_bytes = r.job.precision == sched::Precision::kFp32 ? 4 : 2;
    ps.tp_link = cluster.collective_link(false);
    tensor.stages = sim::tp_collectives_per_stage(*r.model, *r.partition, ps);
  }
  const std::vector<std::string> traces =
      sim::to_chakra(plan, costs, cluster, sim::sim_options(r.job), tensor);
  std::error_code ec;
  fs::create_directories(a.output, ec);
  PW_CHECK(!ec && fs::is_directory(a.output), ConfigError,
           a.output << ": cannot create the output folder" << (ec ? ": " + ec.message() : ""));
  for (std::size_t g = 0; g < traces.size(); ++g) {
    write_file_atomically(
        (fs::path(a.output) / (a.prefix + "." + std::to_string(g) + ".et")).string(), traces[g]);
  }
  write_file_atomically((fs::path(a.output) / (a.prefix + ".comm_groups.json")).string(),
                        sim::chakra_comm_groups(plan.shape.ranks, r.job.dp, r.job.tp));
  spdlog::info("wrote {} Chakra traces {}/{}.<rank>.et ({} ranks x dp {} x tp {})", traces.size(),
               a.output, a.prefix, plan.shape.ranks, r.job.dp, r.job.tp);
}

void setup_export_chakra(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export-chakra",
      "Write a plan as Chakra execution traces, one per rank, for ASTRA-sim (docs/interop.md)");
  cmd->add_option("plan", a->plan_file, "plan file (CSV, torch-comms CSV or JSON); or --schedule")
      ->check(CLI::ExistingFile);
  add_job_flags(cmd, a->job);
  cmd->add_option("--profile", a->costs.profile_path, "executor profile (pipewright-profile JSON)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--forward-ms", a->costs.what_if.forward_ms,
                  "what-if: F per stage (one value or one per stage)")
      ->delimiter(',');
  cmd->add_option("--backward-ms", a->costs.what_if.backward_ms,
                  "what-if: full backward B = I + W per stage")
      ->delimiter(',');
  cmd->add_option("--cluster", a->cluster_file, "cluster JSON (pipewright-cluster)")
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", a->output, "folder for the traces <prefix>.<rank>.et")->required();
  cmd->add_option("--prefix", a->prefix, "trace file prefix (ASTRA-sim's workload name)")
      ->capture_default_str();
  cmd->callback([a] { run_export(*a); });
}

struct ImportArgs {
  std::string input;
  std::string format = "json";
  std::string output = "-";
};

// -f FORMAT (a plan format) and -o FILE, for import-chakra and convert.
void add_plan_output_flags(CLI::App* cmd, ImportArgs& a, bool format_required) {
  auto* format = cmd->add_option("-f,--format", a.format, kPlanFormats)
                     ->check(CLI::IsMember({"json", "csv", "torch-comms"}));
  if (format_required) {
    format->required();
  } else {
    format->capture_default_str();
  }
  cmd->add_option("-o,--output", a.output, "output file (default: stdout)");
}

void setup_import_chakra(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand(
      "import-chakra",
      "Read Chakra execution traces of a pipeline back as a plan (docs/interop.md)");
  cmd->add_option("dir", a->input, "folder of <prefix>.<rank>.et traces")->required();
  add_plan_output_flags(cmd, *a, false);
  cmd->callback([a] {
    write_plan(sched::AnyPlan{sim::from_chakra(read_traces(a->input))}, a->format, a->output);
  });
}

void setup_convert(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand(
      "convert",
      "Write a plan file in another format: JSON, torch's CSV, torch's compute_comms CSV");
  cmd->add_option("plan", a->input, "plan file (CSV, torch-comms CSV or JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  add_plan_output_flags(cmd, *a, true);
  cmd->callback([a] { write_plan(sched::load_plan(a->input), a->format, a->output); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_export_chakra);
PW_REGISTER_COMMAND(setup_import_chakra);
PW_REGISTER_COMMAND(setup_convert);

}  // namespace pipewright::cli
