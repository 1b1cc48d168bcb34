// What a rank prepares before it talks to anyone (run_setup.hpp), and the public entry points
// that need no communication: validate_run_config and dry_run_job (pipewright/exec/run.hpp).
#include "runtime/run_setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>

#include "compat/torch_compat.hpp"
#include "data/file_io.hpp"
#include "data/safetensors.hpp"
#include "nccl/nccl_device.hpp"
#include "pipewright/exec/backend.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/memory.hpp"
#include "runtime/evaluation.hpp"

namespace pipewright::exec {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const RunConfig& c,
                                                        std::vector<torch::Tensor> params) {
  if (params.empty()) return nullptr;
  if (c.optimizer == sched::Optimizer::kSgd) {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  if (c.optimizer == sched::Optimizer::kAdam) {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(c.lr).weight_decay(c.weight_decay));
  }
  return std::make_unique<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
}

namespace {

LossKind resolve_loss(const RunConfig& c, const graph::Model& model) {
  if (!c.loss.empty()) {
    auto k = parse_loss_kind(c.loss);
    PW_CHECK(k.has_value(), ConfigError,
             "--loss must be mse or cross-entropy, got '" << c.loss << "'");
    return *k;
  }
  auto k = model_loss_kind(model);
  PW_CHECK(k.has_value(), ConfigError,
           "--loss is required: model '" << model.name << "' has no loss node");
  return *k;
}

std::unique_ptr<Dataset> load_data(const RunConfig& c, const graph::Model& model) {
  if (!c.dataset.empty()) {
    PW_CHECK(model.input.shape.size() == 1 && model.input.dtype == "int64", ConfigError,
             "--dataset " << c.dataset << " yields int64 token windows [seq], but model '"
                          << model.name << "' takes " << model.input.dtype << " input of "
                          << model.input.shape.size() << " dimension(s)");
    return load_bundled_dataset(c.dataset, model.input.shape[0]);
  }
  return load_npy_dataset(c.data_x, c.data_y);
}

// Note [Outputs checked first]: an output that cannot be written fails before rendezvous, not
// after training (issue 20). Each rank checks only what it writes: world rank 0 --save, --trace
// and --profile; the first pipeline rank of each replica --save's replica files; every rank its
// file under --checkpoint-dir.
void check_outputs(const RunConfig& c, int world_rank) {
  const int pp_index = world_rank % c.pp;
  const int dp_index = world_rank / c.pp;
  if (world_rank == 0) {
    if (!c.save_path.empty()) check_output_file(c.save_path, "--save");
    if (!c.outputs_path.empty()) check_output_file(c.outputs_path, "--outputs");
    if (!c.trace_path.empty()) check_output_file(c.trace_path, "--trace");
    if (!c.profile_path.empty()) check_output_file(c.profile_path, "--profile");
    if (!c.metrics_path.empty()) check_output_file(c.metrics_path, "--metrics");
  }
  if (c.save_replicas && pp_index == 0) {
    check_output_file(replica_weights_path(c.save_path, dp_index), "--save-replicas");
  }
  if (!c.checkpoint_dir.empty()) check_output_dir(c.checkpoint_dir, "--checkpoint-dir", world_rank);
}

// Issue 20, item 7: a model file's layer sizes imply the memory of its weights; a rank must not
// try to allocate a petabyte (libtorch's allocator then fails with an internal error and a
// stack trace). The float32 weights of this rank's stages, with their gradients and the
// optimizer's state (sched::optimizer_state_factor per weight), must fit the host's physical
// memory, or PIPEWRIGHT_MAX_PARAM_BYTES when set (docs/reliability.md, "Input limits").
void check_parameter_memory(const RunConfig& c, const Prepared& p) {
  double params = 0;
  for (int s : p.plan.shape.stages_of_rank(p.pp_index)) {
    for (int n :
         p.partition.graph.stages.at(static_cast<std::size_t>(p.plan.shape.model_stage(s))).nodes)
      params += parameter_count(p.model.nodes.at(static_cast<std::size_t>(n)));
  }
  const double bytes = params * 4 * (2 + sched::optimizer_state_factor(c.optimizer, c.momentum));
  double limit =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  std::string source = "this host's memory";
  if (const char* env = std::getenv("PIPEWRIGHT_MAX_PARAM_BYTES"); env != nullptr && *env) {
    char* end = nullptr;
    limit = std::strtod(env, &end);
    PW_CHECK(
        end != env && *end == '\0' && limit > 0, ConfigError,
        "environment variable PIPEWRIGHT_MAX_PARAM_BYTES='" << env << "' is not a positive number");
    source = "PIPEWRIGHT_MAX_PARAM_BYTES";
  }
  PW_CHECK(bytes <= limit, ConfigError,
           "rank " << p.world.rank << ": the stages of model '" << p.model.name
                   << "' on this rank (" << c.model_path << ") have " << params << " parameters, "
                   << bytes << " bytes with gradients and optimizer state, more than " << source
                   << " (" << limit << " bytes; set PIPEWRIGHT_MAX_PARAM_BYTES to override)");
}

// Note [Evaluation] (evaluation.hpp): the evaluation set, the held-out split of a bundled
// dataset taken out of the training data, and the forward-only plan.
void prepare_evaluation(const RunConfig& c, Prepared& p) {
  if (!c.eval_dataset.empty()) {
    PW_CHECK(p.model.input.shape.size() == 1 && p.model.input.dtype == "int64", ConfigError,
             "--eval-dataset " << c.eval_dataset << " yields int64 token windows [seq], but model '"
                               << p.model.name << "' takes " << p.model.input.dtype << " input");
    const std::int64_t seq = p.model.input.shape[0];
    std::shared_ptr<const Dataset> all = load_bundled_dataset(c.eval_dataset, seq);
    const HeldOutSplit split = held_out_split(all->size(), seq);
    p.eval_data =
        std::make_unique<SubsetDataset>(all, split.eval_begin, all->size(), " (held-out split)");
    if (c.dataset == c.eval_dataset) {
      std::shared_ptr<const Dataset> train(std::move(p.data));
      p.data = std::make_unique<SubsetDataset>(train, 0, split.train_end, " (training split)");
    }
  } else {
    p.eval_data = load_npy_dataset(c.eval_data_x, c.eval_data_y);
  }
  check_dataset_matches_model(*p.eval_data, p.model, p.loss);
  PW_CHECK(p.eval_data->size() >= 1, ConfigError, "the evaluation data has no samples");
  sched::JobSpec job = c;
  job.forward_only = true;
  job.recompute = sched::RecomputeSpec{};
  p.eval_plan = sched::make_plan(job, &p.partition);
}

// --precision bf16 on a GPU that cannot compute in bfloat16 (before compute capability 8.0):
// exit 2 before any peer is contacted, as torch.cuda.is_bf16_supported() would say.
// Note [bf16 device check] (nccl_device.hpp): the compute capability where the CUDA runtime can
// say; the probe only where it cannot (a build without the CUDA toolkit).
void check_bf16_device(const RunConfig& c, torch::Device device) {
  if (c.precision != sched::Precision::kBf16 || !device.is_cuda()) return;
  const int index = device.has_index() ? device.index() : 0;
  std::string why;
  if (const auto cc = cuda_compute_capability(index, &why)) {
    const std::string refusal = bf16_capability_refusal(index, *cc);
    if (!refusal.empty()) throw ConfigError(refusal);
    return;
  }
  try {
    const auto a =
        torch::ones({2, 2}, torch::TensorOptions().dtype(torch::kBFloat16).device(device));
    (void)torch::matmul(a, a).sum().item<float>();
  } catch (const std::exception& e) {
    throw ConfigError("--precision bf16: CUDA device " + std::to_string(index) +
                      " cannot compute in bfloat16 (" + e.what() +
                      "; compute capability unknown: " + why + "); use --precision fp16 or fp32");
  }
}

}  // namespace

std::string replica_weights_path(const std::string& path, int replica) {
  const std::string ext = ".safetensors";
  std::string base = path;
  if (base.size() >= ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0) {
    base.resize(base.size() - ext.size());
  }
  return base + ".replica" + std::to_string(replica) + ext;
}

void prepare_job(const RunConfig& c, Prepared& p) {
  validate_run_config(c);
  p.model = graph::load_model(c.model_path);
  check_script_files(p.model);
  p.partition = sched::resolve_partition(c, p.model);
  p.plan = sched::make_plan(c, &p.partition);
  p.loss = resolve_loss(c, p.model);
  p.data = load_data(c, p.model);
  check_dataset_matches_model(*p.data, p.model, p.loss);
  PW_CHECK(p.data->size() >= 1, ConfigError, "the training data has no samples");
  if (c.eval_every > 0) prepare_evaluation(c, p);
}

Prepared prepare(const RunConfig& c) {
  Prepared p;
  prepare_job(c, p);
  p.world = resolve_world(c.world, current_environment());
  PW_CHECK(p.world.world_size == c.pp * c.dp, ConfigError,
           "world size " << p.world.world_size << " (from "
                         << (p.world.sources.empty() ? std::string("defaults") : p.world.sources)
                         << ") != --pp " << c.pp << " x --dp " << c.dp << " = " << c.pp * c.dp);
  p.pp_index = p.world.rank % c.pp;
  p.dp_index = p.world.rank / c.pp;
  if (c.backend == Backend::kNccl) {
    // Before any stage is built or peer contacted (issue 8): too few devices, a bad
    // --device-map or a build without NCCL exit 2 with the reason.
    const int device = nccl_rank_device(p.world.local_rank, p.world.local_world_size, c.device_map);
    PW_CHECK(torch::cuda::is_available(), ConfigError,
             "--backend nccl needs a CUDA-enabled libtorch, but this pipewright was built "
             "against a CPU-only libtorch (docs/gpu.md: building with a CUDA libtorch)");
    p.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device));
  }
  check_bf16_device(c, p.device);
  check_outputs(c, p.world.rank);
  check_parameter_memory(c, p);
  p.fingerprint = job_fingerprint(c, p.plan, to_string(p.loss));
  return p;
}

std::vector<StageSetup> build_stages(const RunConfig& c, const Prepared& p,
                                     std::vector<std::shared_ptr<ModuleBody>>* bodies) {
  std::map<std::string, torch::Tensor> init;
  if (!c.init_path.empty()) init = load_safetensors(c.init_path);
  std::vector<StageSetup> setups;
  const auto& g = p.partition.graph;
  for (int s : p.plan.shape.stages_of_rank(p.pp_index)) {
    const int model_stage = p.plan.shape.model_stage(s);  // Note [Stage replicas] (plan.hpp)
    const auto& info = g.stages.at(static_cast<std::size_t>(model_stage));
    StageBuildOptions opts;
    opts.seed = c.seed;
    opts.device = p.device;
    StageModule module(p.model, info, opts);
    if (!c.init_path.empty()) module.load_parameters(init, c.init_path);
    auto body = std::make_shared<ModuleBody>(std::move(module));
    StageSetup st;
    st.stage = s;
    st.num_outputs = static_cast<int>(body->module().outputs().size());
    st.consumers.resize(static_cast<std::size_t>(st.num_outputs));
    st.inputs.resize(body->module().inputs().size());
    // The partition's edges between model stages, as edges between this replica's plan stages.
    const auto& shape = p.plan.shape;
    const auto replica_of = [&](int model) {
      if (!shape.has_replicas() || model < 0) return model;  // -1: the model input
      const auto mine = shape.replicas_of(model_stage);
      const auto k = std::find(mine.begin(), mine.end(), s) - mine.begin();
      return static_cast<int>(shape.replicas_of(model).at(static_cast<std::size_t>(k)));
    };
    for (const auto& e : g.edges) {
      if (e.consumer_stage == model_stage) {
        st.inputs.at(static_cast<std::size_t>(e.consumer_input)) =
            InputSource{replica_of(e.producer_stage), e.producer_output};
      }
      if (e.producer_stage == model_stage) {
        st.consumers.at(static_cast<std::size_t>(e.producer_output))
            .emplace_back(replica_of(e.consumer_stage), e.consumer_input);
      }
    }
    st.loss_output = body->module().prediction_output().value_or(-1);
    st.recompute = c.recompute.recomputes(model_stage);  // Note [Activation recompute]
    st.optimizer = make_optimizer(c, body->parameters());
    st.body = body;
    bodies->push_back(body);
    setups.push_back(std::move(st));
  }
  return setups;
}

namespace {

// The executor's own flags of the training recipe (issue 33): loss scaling, evaluation.
void validate_recipe_flags(const RunConfig& c) {
  PW_CHECK(c.precision != sched::Precision::kFp16 || c.backend == Backend::kNccl ||
               compat::kCpuAutocastFp16,
           ConfigError,
           "--precision fp16 on the CPU needs libtorch 2.x (this pipewright is built against "
               << compat::kTorchMajor << "." << compat::kTorchMinor
               << ", whose CPU autocast has bfloat16 only): use --precision bf16, or the "
                  "pip-torch build (docs/gpu.md)");
  PW_CHECK(std::isfinite(c.initial_loss_scale) && c.initial_loss_scale > 0, ConfigError,
           "--initial-loss-scale must be > 0, got " << c.initial_loss_scale);
  PW_CHECK(std::isfinite(c.min_loss_scale) && c.min_loss_scale > 0 &&
               c.min_loss_scale <= c.initial_loss_scale,
           ConfigError,
           "--min-loss-scale must be in (0, --initial-loss-scale "
               << c.initial_loss_scale << "], got " << c.min_loss_scale);
  PW_CHECK(c.loss_scale_window >= 1, ConfigError,
           "--loss-scale-window must be >= 1, got " << c.loss_scale_window);
  PW_CHECK(c.eval_every >= 0, ConfigError,
           "--eval-every must be >= 0 (0: no evaluation), got " << c.eval_every);
  PW_CHECK(c.eval_batches >= 1, ConfigError, "--eval-batches must be >= 1, got " << c.eval_batches);
  const bool npy = !c.eval_data_x.empty() || !c.eval_data_y.empty();
  const bool any = npy || !c.eval_dataset.empty();
  PW_CHECK(c.eval_every > 0 || !any, ConfigError,
           (npy ? "--eval-data-x/--eval-data-y" : "--eval-dataset")
               << " needs --eval-every N (evaluate every N steps)");
  if (c.eval_every == 0) return;
  PW_CHECK(!c.forward_only, ConfigError,
           "--eval-every has no effect with --forward-only (the run itself evaluates)");
  PW_CHECK(c.plan_path.empty(), ConfigError,
           "--eval-every needs --schedule: the evaluation's forward-only plan is generated from "
           "the schedule, and --plan gives a training plan");
  PW_CHECK(npy != !c.eval_dataset.empty(), ConfigError,
           "--eval-every needs either --eval-data-x and --eval-data-y, or --eval-dataset");
  PW_CHECK(!npy || (!c.eval_data_x.empty() && !c.eval_data_y.empty()), ConfigError,
           "--eval-data-x and --eval-data-y go together");
}

}  // namespace

void validate_run_config(const RunConfig& c) {
  PW_CHECK(!c.model_path.empty(), ConfigError, "--model is required");
  PW_CHECK(c.batch_size >= 1, ConfigError, "--batch-size must be >= 1, got " << c.batch_size);
  sched::validate_job(c);
  PW_CHECK(std::isfinite(c.timeout_s) && c.timeout_s > 0, ConfigError,
           "--timeout must be > 0 seconds, got " << c.timeout_s);
  PW_CHECK(c.warmup_steps >= 0, ConfigError, "--warmup-steps must be >= 0");
  PW_CHECK(c.prefetch >= 0, ConfigError, "--prefetch must be >= 0 steps, got " << c.prefetch);
  PW_CHECK(c.check_replicas >= 0, ConfigError,
           "--check-replicas must be >= 0 (0 = never), got " << c.check_replicas);
  PW_CHECK(c.checkpoint_every >= 0, ConfigError,
           "--checkpoint-every must be >= 0, got " << c.checkpoint_every);
  PW_CHECK(!c.resume || !c.checkpoint_dir.empty(), ConfigError, "--resume needs --checkpoint-dir");
  PW_CHECK(c.checkpoint_every == 0 || !c.checkpoint_dir.empty(), ConfigError,
           "--checkpoint-every needs --checkpoint-dir");
  PW_CHECK(!c.save_replicas || !c.save_path.empty(), ConfigError,
           "--save-replicas needs --save FILE");
  PW_CHECK(c.outputs_path.empty() || c.forward_only, ConfigError,
           "--outputs needs --forward-only (a training run writes weights with --save)");
  PW_CHECK(c.outputs_path.empty() || c.dp == 1, ConfigError,
           "--outputs supports --dp 1 only, got --dp " << c.dp);
  const bool npy = !c.data_x.empty() || !c.data_y.empty();
  PW_CHECK(npy != !c.dataset.empty(), ConfigError,
           "give either --data-x and --data-y, or --dataset (exactly one data source)");
  PW_CHECK(!npy || (!c.data_x.empty() && !c.data_y.empty()), ConfigError,
           "--data-x and --data-y go together");
  PW_CHECK(c.loss.empty() || parse_loss_kind(c.loss).has_value(), ConfigError,
           "--loss must be mse or cross-entropy, got '" << c.loss << "'");
  validate_recipe_flags(c);
}

DryRun dry_run_job(const RunConfig& c) {
  Prepared p;
  prepare_job(c, p);
  DryRun out;
  out.model_name = p.model.name;
  for (const auto& list : p.plan.per_rank) out.actions += static_cast<std::int64_t>(list.size());
  // The one memory model (Note [Memory model] in sched/memory.hpp), as `simulate` reports it.
  out.memory = sched::peak_memory(p.plan, sched::costs_from_partition(p.model, p.partition),
                                  sched::memory_options(c));
  out.plan = std::move(p.plan);
  return out;
}

}  // namespace pipewright::exec
