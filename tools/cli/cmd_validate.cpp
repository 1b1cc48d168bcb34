// `pipewright validate PLAN [--transport buffered|rendezvous]`: loads a plan (.json or torch's
// .csv), reports every validation problem and, for a valid plan, dry-runs it (compute-only plans
// are lowered first) under the transport to find deadlocks. Exit 0 with a one-line summary when
// the plan is valid and deadlock-free; otherwise InvalidPlanError (exit 2) with every diagnostic,
// or the waiting cycle and the rank x step grid with the stuck cells marked.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <variant>

#include "commands.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::cli {
namespace {

struct ValidateArgs {
  std::string path;
  std::string transport = "buffered";
  int stages = -1;
  int microbatches = -1;
};

std::size_t action_count(const std::vector<std::vector<sched::Action>>& per_rank) {
  std::size_t n = 0;
  for (const auto& ops : per_rank) n += ops.size();
  return n;
}

void run_validate(const ValidateArgs& args) {
  const sched::Transport transport = sched::parse_transport(args.transport);
  sched::CsvOptions csv;
  csv.stages = args.stages;
  csv.microbatches = args.microbatches;
  const sched::AnyPlan any = sched::load_plan(args.path, csv);
  const bool lowered = sched::is_lowered(any);
  std::vector<sched::Diagnostic> diags =
      std::visit([](const auto& plan) { return sched::validate(plan); }, any);
  if (!diags.empty()) {
    std::string msg = args.path + ": invalid " + (lowered ? "lowered" : "compute-only") +
                      " plan, " + std::to_string(diags.size()) + " problem(s):";
    throw InvalidPlanError(msg + sched::format_diagnostics(diags));
  }
  const sched::LoweredPlan plan =
      lowered ? std::get<sched::LoweredPlan>(any) : sched::lower(std::get<sched::ComputePlan>(any));
  const sched::DeadlockReport report = sched::dry_run(plan, transport);
  if (!report.ok) {
    throw InvalidPlanError(args.path + ": " + (lowered ? "" : "lowered plan: ") + report.message());
  }
  const auto& sh = plan.shape;
  const auto& counted = lowered ? plan.per_rank : std::get<sched::ComputePlan>(any).per_rank;
  std::cout << args.path << ": valid " << (lowered ? "lowered" : "compute-only") << " plan ("
            << sh.schedule << "), " << sh.ranks << " ranks, " << sh.stages << " stages, "
            << sh.microbatches << " microbatches, " << action_count(counted)
            << " actions; deadlock-free under " << sched::to_string(transport) << " sends"
            << (lowered ? "" : " (after lowering)") << "\n";
}

void setup_validate(CLI::App& app) {
  auto args = std::make_shared<ValidateArgs>();
  auto* cmd = app.add_subcommand(
      "validate", "Check a plan (.json or torch's .csv) and dry-run it for deadlocks");
  cmd->add_option("plan", args->path, "plan file (.json, or .csv as written by torch)")->required();
  cmd->add_option("--transport,-t", args->transport,
                  "buffered (sends never block) | rendezvous (a send waits for its receive)")
      ->check(CLI::IsMember({"buffered", "rendezvous"}))
      ->capture_default_str();
  cmd->add_option("-s,--stages", args->stages,
                  "CSV only: declared number of stages (else inferred)");
  cmd->add_option("-m,--microbatches", args->microbatches,
                  "CSV only: declared number of microbatches (else inferred)");
  cmd->callback([args] { run_validate(*args); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_validate);

}  // namespace pipewright::cli
