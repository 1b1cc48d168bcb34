// Tied parameters across stages (tied_sync.hpp, Note [Tied gradient exchange]).
#include "dp/tied_sync.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "model/stage_module.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/action.hpp"

namespace pipewright::exec {

std::vector<TiedGroup> cross_stage_tied_groups(const graph::Model& model,
                                               const graph::Partition& partition) {
  std::map<std::string, TiedGroup> groups;
  std::set<std::string> tied;
  for (const graph::Node& node : model.nodes) {
    if (!node.script) continue;
    for (const auto& p : node.script->parameters) {
      if (!p.tied_to.empty()) tied.insert(p.tied_to);
    }
  }
  for (std::size_t v = 0; v < model.nodes.size(); ++v) {
    const graph::Node& node = model.nodes[v];
    if (!node.script) continue;
    for (const auto& p : node.script->parameters) {
      const std::string group = p.tied_to.empty() ? p.name : p.tied_to;
      if (tied.count(group) == 0) continue;
      TiedGroup& g = groups[group];
      g.name = group;
      PW_CHECK(g.shape.empty() || g.shape == p.shape, ConfigError,
               model.name << ": tied parameter '" << p.name << "' of node '" << node.name
                          << "' has another shape than the other copies of '" << group << "'");
      g.shape = p.shape;
      const int stage = partition.node_stage.at(v);
      if (std::find(g.stages.begin(), g.stages.end(), stage) == g.stages.end()) {
        g.stages.push_back(stage);
      }
    }
  }
  std::vector<TiedGroup> out;
  for (auto& [name, g] : groups) {
    if (g.stages.size() < 2) continue;
    std::sort(g.stages.begin(), g.stages.end());
    out.push_back(std::move(g));
  }
  return out;
}

std::string replica_group_name(int model_stage, const std::string& param) {
  return "replica:" + std::to_string(model_stage) + ":" + param;
}

std::vector<TiedGroup> replica_groups(const graph::Model& model, const graph::Partition& partition,
                                      const sched::PlanShape& shape,
                                      const std::set<std::string>& tied_groups) {
  std::vector<TiedGroup> out;
  if (!shape.has_replicas()) return out;
  for (int d = 0; d < shape.model_stages(); ++d) {
    const auto replicas = shape.replicas_of(d);
    if (replicas.size() < 2) continue;
    const StageModule module(model, partition.graph.stages.at(static_cast<std::size_t>(d)), {});
    const auto& params = module.named_parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (tied_groups.count(module.tie_groups()[i]) != 0) continue;
      TiedGroup g;
      g.name = replica_group_name(d, params[i].first);
      g.shape = params[i].second.sizes().vec();
      g.stages.assign(replicas.begin(), replicas.end());
      out.push_back(std::move(g));
    }
  }
  return out;
}

std::vector<TiedCopy> local_tied_copies(const std::vector<const StageModule*>& modules,
                                        const std::vector<std::int32_t>& stages,
                                        const sched::PlanShape& shape,
                                        const std::set<std::string>& tied_groups) {
  std::vector<TiedCopy> copies;
  for (std::size_t b = 0; b < modules.size(); ++b) {
    const auto& params = modules[b]->named_parameters();
    const auto& keys = modules[b]->tie_groups();
    const int model_stage = shape.model_stage(stages.at(b));
    const bool replicated = shape.replicas_of(model_stage).size() > 1;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (tied_groups.count(keys[i]) != 0) {
        copies.push_back(TiedCopy{keys[i], params[i].second, stages.at(b)});
      } else if (replicated) {
        copies.push_back(TiedCopy{replica_group_name(model_stage, params[i].first),
                                  params[i].second, stages.at(b)});
      }
    }
  }
  return copies;
}

TiedGradientSync::TiedGradientSync(DataParallelHooks* inner, Communicator* pipe,
                                   std::vector<TiedGroup> groups, std::vector<TiedCopy> local,
                                   const sched::LoweredPlan& plan, torch::Device device,
                                   std::chrono::milliseconds timeout)
    : inner_(inner),
      pipe_(pipe),
      groups_(std::move(groups)),
      local_(std::move(local)),
      device_(device),
      timeout_(timeout) {
  PW_ASSERT(inner_ != nullptr && pipe_ != nullptr, "tied sync needs hooks and a communicator");
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    bool optim_seen = false;
    for (const sched::Action& a : plan.per_rank[r]) {
      if (a.kind == sched::ActionKind::kOptimizerStep) optim_seen = true;
      PW_CHECK(!optim_seen || a.kind == sched::ActionKind::kOptimizerStep ||
                   a.kind == sched::ActionKind::kReduceGrad,
               ConfigError,
               "rank " << r << " of the plan runs " << sched::to_string(a)
                       << " after an OPTIM; with parameters tied across stages every rank's "
                          "OPTIM actions must come last (they follow the tied-gradient exchange)");
    }
  }
  std::map<std::string, std::size_t> index;
  for (const TiedGroup& g : groups_) {
    std::int64_t numel = 1;
    for (const auto d : g.shape) numel *= d;
    index[g.name] = offsets_.size();
    offsets_.push_back(total_);
    total_ += numel;
  }
  for (const TiedCopy& c : local_) {
    const auto it = index.find(c.group);
    PW_ASSERT(it != index.end(), "tied copy of unknown group '" << c.group << "'");
    local_group_.push_back(it->second);
  }
}

void TiedGradientSync::before_optimizer_steps(std::int64_t step) {
  inner_->before_optimizer_steps(step);
  if (groups_.empty()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor flat =
      torch::zeros({total_}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  // What the optimizer steps for each copy: the parameter, or its ZeRO piece (the first
  // piece-size elements of the group's slot: every stage of this replica holds the same piece).
  if (stepped_.empty()) {
    for (const TiedCopy& c : local_) {
      stepped_.push_back(inner_->optimizer_tensor_of(c.stage, c.param));
    }
  }
  const std::vector<torch::Tensor>& stepped = stepped_;
  const auto slice = [&](std::size_t i) {
    return flat.narrow(0, offsets_[local_group_[i]], stepped[i].numel()).view(stepped[i].sizes());
  };
  for (std::size_t i = 0; i < local_.size(); ++i) {
    const torch::Tensor& grad = stepped[i].grad();
    if (grad.defined()) slice(i).add_(grad.to(torch::kFloat));
  }
  BufferView view;
  view.data = flat.data_ptr();
  view.count = static_cast<std::size_t>(total_);
  view.dtype = DType::kFloat32;
  if (flat.is_cuda()) {
    view.device.kind = Device::Kind::kCuda;
    view.device.index = flat.device().index();
  }
  OpContext ctx{step, -1, -1, "all_reduce of tied parameters' gradients"};
  pipe_->all_reduce(view, ReduceOp::kSum, ctx)->wait(timeout_);
  for (std::size_t i = 0; i < local_.size(); ++i) {
    torch::Tensor param = stepped[i];
    if (param.grad().defined()) {
      param.mutable_grad().copy_(slice(i));
    } else {
      param.mutable_grad() = slice(i).to(param.scalar_type()).clone();
    }
  }
}

}  // namespace pipewright::exec
