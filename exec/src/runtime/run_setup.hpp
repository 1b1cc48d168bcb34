// What a rank of `pipewright run` prepares before it talks to anyone (steps 1 and 2 of the order
// in run.cpp): the job resolved (model, partition, plan, loss, data), the checks that need no
// communication, the world it belongs to, and its stages built. `run --dry-run` stops after the
// first half (dry_run_job). Private to exec/ (names torch types).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "interpreter/interpreter.hpp"
#include "model/model_check.hpp"
#include "model/stage_module.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/run.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/plan.hpp"
#include "store/agreement.hpp"

namespace pipewright::exec {

class ModuleBody final : public StageBody {
 public:
  explicit ModuleBody(StageModule module) : module_(std::move(module)) {}
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& inputs) override {
    return module_.forward(inputs);
  }
  std::vector<torch::Tensor> parameters() override { return module_.parameters(); }
  // What checkpoints save and DDP broadcasts at start: the state_dict's buffers of the dtypes the
  // communicators carry. Non-persistent buffers are constants read from the node files.
  std::vector<torch::Tensor> buffers() override {
    std::vector<torch::Tensor> out;
    for (const auto& [name, t] : module_.persistent_buffers()) {
      const auto type = t.scalar_type();
      if (type == torch::kFloat || type == torch::kDouble || type == torch::kLong) out.push_back(t);
    }
    return out;
  }
  [[nodiscard]] const StageModule& module() const noexcept { return module_; }

 private:
  StageModule module_;
};

// Everything this rank computes before it talks to anyone.
struct Prepared {
  graph::Model model;
  graph::Partition partition;
  sched::LoweredPlan plan;
  LossKind loss = LossKind::kMse;
  std::unique_ptr<Dataset> data;
  // --eval-every: the evaluation set and the job's forward-only plan (Note [Evaluation]).
  std::unique_ptr<Dataset> eval_data;
  sched::LoweredPlan eval_plan;
  WorldInfo world;
  int pp_index = 0;
  int dp_index = 0;
  torch::Device device = torch::kCPU;
  JobFingerprint fingerprint;  // compared with every other rank's after rendezvous
};

// Step 1 without the world: flags, model, partition, plan, loss, data (what --dry-run checks).
void prepare_job(const RunConfig& c, Prepared& p);

// The optimizer of --optimizer over `params` (null when there are none): a stage's, or ZeRO's
// over a replica's shard (zero/zero.hpp).
[[nodiscard]] std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const RunConfig& c, std::vector<torch::Tensor> params);
// Steps 1 and the world: prepare_job, then this rank's place in the pp x dp mesh, its device,
// the outputs it will write, its parameter memory, and the job's fingerprint.
[[nodiscard]] Prepared prepare(const RunConfig& c);
// Step 2: this rank's stages (seeded init or --init), their edges and optimizers; `bodies` gets
// the modules, in the order of the stages on this rank.
[[nodiscard]] std::vector<StageSetup> build_stages(
    const RunConfig& c, const Prepared& p, std::vector<std::shared_ptr<ModuleBody>>* bodies);
// --save-replicas: <FILE without .safetensors>.replica<R>.safetensors
[[nodiscard]] std::string replica_weights_path(const std::string& path, int replica);

}  // namespace pipewright::exec
