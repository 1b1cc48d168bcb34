// `pipewright transfer-profile --model M --from P0 --profile F0 --to P1 [-o F1]`: predicts the
// stage costs of partition P1 from an executor profile measured on partition P0 of the same
// model (sim/cost_inputs.hpp, Note [Profile transfer]), so a configuration can be simulated
// before it is run: `pipewright simulate PLAN --profile F1 --cluster C`.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "commands.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sim/cost_inputs.hpp"

namespace pipewright::cli {
namespace {

struct TransferArgs {
  std::string model;
  std::string from;
  std::string profile;
  std::string to;
  std::string output = "-";
};

void setup_transfer(CLI::App& app) {
  auto a = std::make_shared<TransferArgs>();
  auto* cmd = app.add_subcommand(
      "transfer-profile",
      "Predict the stage costs of another partition of the same model from a measured profile");
  cmd->add_option("--model", a->model, "model JSON")->required()->check(CLI::ExistingFile);
  cmd->add_option("--from", a->from, "partition the profile was measured on")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--profile", a->profile, "profile from `pipewright run --profile`")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--to", a->to, "partition to predict")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", a->output, "profile to write (- for stdout)")
      ->capture_default_str();
  cmd->callback([a] {
    const graph::Model model = graph::load_model(a->model);
    const graph::Partition from = graph::load_partition(a->from);
    const graph::Partition to = graph::load_partition(a->to);
    const sched::CostTable measured = sched::load_costs(a->profile);
    write_output(a->output, sched::to_json(sim::transfer_profile(model, from, measured, to)));
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_transfer);

}  // namespace pipewright::cli
