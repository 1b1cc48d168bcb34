// run_training (pipewright/exec/run.hpp): from flags to a finished training run.
//
// Order of work (docs/executor.md):
//   1. checks that need no communication, identical on every rank: flags, model, partition,
//      plan (generated or loaded, then lowered with REDUCE_GRAD and OPTIM), data files and their
//      shapes against the model, world size == pp x dp, data-parallel options, the outputs this
//      rank will write (Note [Outputs checked first]); the job's fingerprint;
//   2. this rank's stages built (seeded init or --init), optimizers, data stream;
//   3. rendezvous, world communicator, agreement on the job (Note [Job agreement] in
//      agreement.cpp), mesh (pipeline groups then data-parallel groups);
//   4. start-up shape agreement along the pipeline, data-parallel on_start;
//   5. steps; after each, the loss is all-reduced over the world so rank 0 logs the global mean;
//   6. --save (replica 0's stages gathered on world rank 0), --trace / --profile (every rank's
//      action timings gathered on world rank 0).
#include "pipewright/exec/run.hpp"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "data/dataset.hpp"
#include "data/file_io.hpp"
#include "data/prefetch.hpp"
#include "data/safetensors.hpp"
#include "data/sharding.hpp"
#include "dp/dp_algorithm.hpp"
#include "dp/mesh.hpp"
#include "dp/tied_sync.hpp"
#include "model/model_check.hpp"
#include "model/stage_module.hpp"
#include "nccl/nccl_device.hpp"
#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/device_map.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"
#include "report/run_report.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/nonfinite.hpp"
#include "runtime/run_outputs.hpp"
#include "store/agreement.hpp"

namespace pipewright::exec {

namespace {

using Clock = std::chrono::steady_clock;

// Tags of the world-communicator messages after training.
constexpr std::int64_t kTagRecordSize = 101;
constexpr std::int64_t kTagRecord = 102;
constexpr std::int64_t kTagParamMetaSize = 103;
constexpr std::int64_t kTagParamMeta = 104;
constexpr std::int64_t kTagParamData = 105;  // float32 data; + 1: int64 data

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

BufferView i64_view(std::int64_t* data, std::size_t count) {
  return BufferView{data, count, DType::kInt64, {}};
}

void send_i64s(Communicator& comm, int dst, std::int64_t size_tag, std::int64_t tag,
               std::vector<std::int64_t> data, std::chrono::milliseconds timeout,
               const std::string& what) {
  std::int64_t n = static_cast<std::int64_t>(data.size());
  OpContext ctx{-1, -1, -1, what};
  comm.send(i64_view(&n, 1), dst, size_tag, ctx)->wait(timeout);
  if (n > 0) comm.send(i64_view(data.data(), data.size()), dst, tag, ctx)->wait(timeout);
}

std::vector<std::int64_t> recv_i64s(Communicator& comm, int src, std::int64_t size_tag,
                                    std::int64_t tag, std::chrono::milliseconds timeout,
                                    const std::string& what) {
  std::int64_t n = 0;
  OpContext ctx{-1, -1, -1, what};
  comm.recv(i64_view(&n, 1), src, size_tag, ctx)->wait(timeout);
  PW_ASSERT(n >= 0 && n < (std::int64_t{1} << 34), "bad message size " << n);
  std::vector<std::int64_t> data(static_cast<std::size_t>(n));
  if (n > 0) comm.recv(i64_view(data.data(), data.size()), src, tag, ctx)->wait(timeout);
  return data;
}

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

// --save-replicas: <FILE without .safetensors>.replica<R>.safetensors
std::string replica_weights_path(const std::string& path, int replica) {
  const std::string ext = ".safetensors";
  std::string base = path;
  if (base.size() >= ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0) {
    base.resize(base.size() - ext.size());
  }
  return base + ".replica" + std::to_string(replica) + ext;
}

// Everything this rank computes before it talks to anyone.
struct Prepared {
  graph::Model model;
  graph::Partition partition;
  sched::LoweredPlan plan;
  LossKind loss = LossKind::kMse;
  std::unique_ptr<Dataset> data;
  WorldInfo world;
  int pp_index = 0;
  int dp_index = 0;
  torch::Device device = torch::kCPU;
  JobFingerprint fingerprint;  // compared with every other rank's after rendezvous
};

// Steps 1 of the order above that need no rendezvous: flags, model, partition, plan, loss, data.
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

// Gathers replica `replica`'s state_dict (stage_module.hpp StageModule::state_dict) on its first
// pipeline rank and writes it to `path`. Floating-point tensors travel as float32, the others
// (integer and bool buffers) as int64, and get their dtype back on the root.
void save_weights(const RunConfig& c, const Prepared& p, Communicator& world,
                  const std::vector<std::shared_ptr<ModuleBody>>& bodies,
                  std::chrono::milliseconds timeout, int replica, const std::string& path) {
  const int root = mesh_world_rank(0, replica, c.pp);
  const auto wire = [](const torch::Tensor& t) {
    return t.is_floating_point() ? torch::kFloat : torch::kLong;
  };
  std::vector<std::pair<std::string, torch::Tensor>> local;
  for (const auto& b : bodies) {
    for (const auto& [name, t] : b->module().state_dict()) {
      local.emplace_back(name, t.detach().to(torch::kCPU).contiguous());
    }
  }
  if (p.dp_index != replica) return;
  const OpContext ctx{-1, -1, -1, "gather weights"};
  if (p.pp_index != 0) {
    std::vector<std::int64_t> meta{static_cast<std::int64_t>(local.size())};
    std::vector<torch::Tensor> flat[2];  // float32, int64
    for (const auto& [name, t] : local) {
      meta.push_back(static_cast<std::int64_t>(name.size()));
      for (char ch : name) meta.push_back(static_cast<unsigned char>(ch));
      meta.push_back(static_cast<std::int64_t>(t.scalar_type()));
      meta.push_back(t.dim());
      for (auto d : t.sizes()) meta.push_back(d);
      flat[wire(t) == torch::kFloat ? 0 : 1].push_back(t.to(wire(t)).reshape({-1}));
    }
    send_i64s(world, root, kTagParamMetaSize, kTagParamMeta, meta, timeout, "gather weights");
    for (int w = 0; w < 2; ++w) {
      if (flat[w].empty()) continue;
      auto buf = torch::cat(flat[w]).contiguous();
      if (buf.numel() == 0) continue;
      world
          .send(BufferView{buf.data_ptr(),
                           static_cast<std::size_t>(buf.numel()),
                           w == 0 ? DType::kFloat32 : DType::kInt64,
                           {}},
                root, kTagParamData + w, ctx)
          ->wait(timeout);
    }
    return;
  }
  std::vector<std::pair<std::string, torch::Tensor>> all = local;
  for (int r = 1; r < c.pp; ++r) {
    const int src = mesh_world_rank(r, replica, c.pp);
    const auto meta =
        recv_i64s(world, src, kTagParamMetaSize, kTagParamMeta, timeout, "gather weights");
    struct Entry {
      std::string name;
      torch::ScalarType type;
      std::vector<std::int64_t> shape;
      std::int64_t numel = 1;
    };
    std::vector<Entry> entries;
    std::int64_t total[2] = {0, 0};
    std::size_t i = 0;
    const auto n = meta.at(i++);
    for (std::int64_t k = 0; k < n; ++k) {
      Entry e;
      const auto len = meta.at(i++);
      for (std::int64_t j = 0; j < len; ++j) e.name.push_back(static_cast<char>(meta.at(i++)));
      e.type = static_cast<torch::ScalarType>(meta.at(i++));
      const auto dims = meta.at(i++);
      for (std::int64_t j = 0; j < dims; ++j) {
        e.shape.push_back(meta.at(i++));
        e.numel *= e.shape.back();
      }
      total[c10::isFloatingType(e.type) ? 0 : 1] += e.numel;
      entries.push_back(std::move(e));
    }
    torch::Tensor buf[2] = {torch::empty({total[0]}, torch::kFloat),
                            torch::empty({total[1]}, torch::kLong)};
    for (int w = 0; w < 2; ++w) {
      if (total[w] == 0) continue;
      world
          .recv(BufferView{buf[w].data_ptr(),
                           static_cast<std::size_t>(total[w]),
                           w == 0 ? DType::kFloat32 : DType::kInt64,
                           {}},
                src, kTagParamData + w, ctx)
          ->wait(timeout);
    }
    std::int64_t off[2] = {0, 0};
    for (const Entry& e : entries) {
      const int w = c10::isFloatingType(e.type) ? 0 : 1;
      all.emplace_back(e.name, buf[w].narrow(0, off[w], e.numel).reshape(e.shape).to(e.type));
      off[w] += e.numel;
    }
  }
  // Floating-point tensors are written as float32 (as before issue 21); a name two stages both
  // hold (a persistent buffer copied into several nodes) is written once.
  std::vector<std::pair<std::string, torch::Tensor>> unique;
  std::set<std::string> seen;
  for (auto& [name, t] : all) {
    if (!seen.insert(name).second) continue;
    unique.emplace_back(name, t.is_floating_point() ? t.to(torch::kFloat) : t);
  }
  save_safetensors(path, unique, {{"format", "pt"}, {"producer", "pipewright run"}});
}

// Gathers every rank's timings on world rank 0 and writes the trace and the profile.
void write_measurements(const RunConfig& c, const Prepared& p, Communicator& world,
                        const Interpreter& interp,
                        const std::vector<std::shared_ptr<ModuleBody>>& bodies,
                        const std::vector<DataWait>& data_waits, std::chrono::milliseconds timeout,
                        std::int64_t baseline_rss, RunResult* result) {
  RankRecord rec;
  rec.world_rank = p.world.rank;
  rec.peak_rss_bytes = peak_rss_bytes();
  rec.baseline_rss_bytes = baseline_rss;
  rec.host_id = this_host_id();
  rec.cpus = p.device.is_cuda() ? 0 : usable_cpus();
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    LocalStageSizes sz;
    sz.stage = p.plan.shape.stages_of_rank(p.pp_index).at(i);
    for (const auto& t : bodies[i]->parameters()) {
      sz.param_bytes.push_back(t.numel() * static_cast<std::int64_t>(t.element_size()));
    }
    rec.stages.push_back(sz);
  }
  for (const auto& t : interp.timings()) {
    rec.actions.push_back(TimedAction{t.action, t.step, t.start_ns, t.end_ns, t.bytes});
  }
  rec.data_waits = data_waits;
  if (p.world.rank != 0) {
    send_i64s(world, 0, kTagRecordSize, kTagRecord, encode_record(rec), timeout,
              "gather measurements");
    return;
  }
  std::vector<RankRecord> records{rec};
  for (int r = 1; r < p.world.world_size; ++r) {
    records.push_back(decode_record(
        recv_i64s(world, r, kTagRecordSize, kTagRecord, timeout, "gather measurements")));
  }
  ReportContext ctx;
  std::ostringstream desc;
  if (c.plan_path.empty()) {
    desc << sched::to_string(c.schedule) << " pp=" << c.pp << " v=" << c.stages_per_rank
         << " m=" << c.microbatches << " dp=" << c.dp;
  } else {
    desc << c.plan_path;
  }
  ctx.plan_description = desc.str();
  ctx.schedule = p.plan.shape.schedule;
  ctx.world_size = p.world.world_size;
  ctx.pp = p.plan.shape.ranks;
  ctx.warmup_steps = std::min<std::int64_t>(c.warmup_steps, c.steps - 1);
  ctx.p2p_uses_core = c.backend != Backend::kMpi;
  for (const auto& st : p.partition.graph.stages)
    ctx.activation_bytes.push_back(st.activation_bytes);
  if (!c.trace_path.empty()) {
    write_file_atomically(c.trace_path, make_trace_json(records, ctx));
    result->written_files.push_back(c.trace_path);
  }
  if (!c.profile_path.empty()) {
    write_file_atomically(c.profile_path, sched::to_json(make_profile(records, p.plan.shape, ctx)));
    result->written_files.push_back(c.profile_path);
  }
}

// What must not change between a checkpoint and its resume: the job (its canonical JSON, every
// default resolved) but --steps, and the executor settings that change what is trained (loss,
// seed, initial weights, data), hashed (FNV-1a).
std::uint64_t checkpoint_fingerprint(const RunConfig& c) {
  sched::JobSpec job = c;
  job.steps = 1;
  std::ostringstream os;
  os << sched::to_json(job) << '|' << c.loss << '|' << c.seed << '|' << c.init_path << '|'
     << c.data_x << '|' << c.data_y << '|' << c.dataset << '|' << c.shuffle;
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : os.str()) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
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

namespace {

// The training itself; `store` is owned by the caller so that it outlives an error thrown here
// (name_unresponsive asks it who stopped answering).
RunResult train(const RunConfig& c, const std::function<void(const StepLog&)>& on_step,
                const std::function<void(const RunStart&)>& on_start, std::unique_ptr<Store>& store,
                int& world_rank) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(c.timeout_s * 1000)));
  Prepared p = prepare(c);
  RunResult result;
  result.world_rank = p.world.rank;
  world_rank = p.world.rank;

  std::vector<std::shared_ptr<ModuleBody>> bodies;
  auto setups = build_stages(c, p, &bodies);
  std::map<int, torch::optim::Optimizer*> optimizer_of_stage;  // owned by the interpreter
  for (const auto& st : setups) optimizer_of_stage[st.stage] = st.optimizer.get();

  // Communication starts here.
  const Backend backend = c.backend;
  if (backend == Backend::kGloo || backend == Backend::kNccl) {
    store = make_tcp_store(p.world, timeout, fingerprint_digest(p.fingerprint));
    rendezvous(*store, p.world, timeout);
  }
  CommOptions comm_opts;
  comm_opts.timeout = timeout;
  comm_opts.shm_collectives = c.shm_collectives;
  if (backend == Backend::kNccl) {
    comm_opts.device_map = parse_device_map(c.device_map, p.world.local_world_size);
  }
  auto world = make_communicator(backend, p.world, store.get(), comm_opts);
  agree_on_job(*world, p.fingerprint, timeout);
  Mesh mesh = make_mesh(*world, c.pp, c.dp);

  std::unique_ptr<DataParallelAlgorithm> dp_algo;
  NoDataParallel no_dp;
  DataParallelHooks* hooks = &no_dp;
  if (c.dp > 1) {
    DataParallelContext ctx;
    ctx.dp_comm = mesh.data.get();
    ctx.pp = c.pp;
    ctx.num_microbatches = c.microbatches;
    ctx.learning_rate = c.lr;
    ctx.timeout = timeout;
    ctx.check_replicas = c.check_replicas;
    dp_algo = make_data_parallel(c.data_parallel, ctx);
    hooks = dp_algo.get();
  }
  // Tied parameters across stages: gradients summed before the optimizer (tied_sync.hpp).
  std::unique_ptr<TiedGradientSync> tied;
  // Chimera's replicas too (Note [Replica gradients]).
  auto groups = cross_stage_tied_groups(p.model, p.partition);
  std::set<std::string> names;
  for (const auto& g : groups) names.insert(g.name);
  for (auto& g : replica_groups(p.model, p.partition, p.plan.shape, names)) {
    groups.push_back(std::move(g));
  }
  if (!groups.empty()) {
    std::vector<const StageModule*> modules;
    for (const auto& b : bodies) modules.push_back(&b->module());
    auto copies =
        local_tied_copies(modules, p.plan.shape.stages_of_rank(p.pp_index), p.plan.shape, names);
    tied = std::make_unique<TiedGradientSync>(hooks, mesh.pipe.get(), std::move(groups),
                                              std::move(copies), p.plan, p.device, timeout);
    hooks = tied.get();
  }
  InterpreterOptions iopts;
  iopts.timeout = timeout;
  iopts.device = p.device;
  iopts.record_timings = !c.trace_path.empty() || !c.profile_path.empty();
  iopts.world_rank = p.world.rank;
  iopts.prepost_receives = c.prepost_receives && backend != Backend::kNccl;
  iopts.nan_policy = c.nan_policy;
  // Note [Measured split backward]: a profiled plan without I/W measures them in its last
  // warm-up step, so that zero-bubble plans can be predicted from its profile.
  if (!c.profile_path.empty()) {
    bool full = false, split = false;
    for (const auto& list : p.plan.per_rank) {
      for (const auto& act : list) {
        full = full || act.kind == sched::ActionKind::kFullBackward;
        split = split || act.kind == sched::ActionKind::kBackwardInput ||
                act.kind == sched::ActionKind::kBackwardWeight;
      }
    }
    const std::int64_t warmup = std::min<std::int64_t>(c.warmup_steps, c.steps - 1);
    if (full && !split && warmup >= 1) iopts.split_backward_step = warmup - 1;
  }
  const LossKind loss_kind = p.loss;
  Interpreter interp(
      p.plan, mesh.pp_index, std::move(setups), mesh.pipe.get(), hooks,
      [loss_kind](const torch::Tensor& out, const torch::Tensor& y) {
        return compute_loss(out, y, loss_kind);
      },
      iopts);

  // Note [Prefetching loader] (prefetch.hpp); the time each step waits for it is traced.
  BatchLoader loader(
      *p.data, ShardedBatches(p.data->size(), c.dp, p.dp_index, c.seed, c.shuffle, c.batch_size),
      p.device, c.microbatches, c.prefetch, iopts.record_timings);
  StepBatch mb = loader.next(0);
  interp.agree_shapes(mb.xs.at(0));
  auto stage_params = interp.stage_params();
  hooks->on_start(stage_params);
  // Note [Runtime memory] in run_report.hpp: the peak RSS before the first step.
  const std::int64_t baseline_rss = peak_rss_bytes();

  // Checkpoints (docs/data-parallel.md): resume from the last complete one, save every N steps
  // and after the last step.
  TrainingState train_state;
  train_state.stages = stage_params;
  for (const auto& sp : stage_params)
    train_state.optimizers.push_back(optimizer_of_stage[sp.stage]);
  train_state.dp_algorithm = dp_algo.get();
  const CheckpointIdentity ckpt_id{p.world.rank, p.world.world_size, checkpoint_fingerprint(c)};
  std::int64_t first_step = 0;
  bool resume_found_none = false;
  if (!c.checkpoint_dir.empty()) remove_stale_temporaries(c.checkpoint_dir, p.world.rank);
  if (c.resume) {
    const std::int64_t s = agree_resume_step(c.checkpoint_dir, p.world.rank, *world, timeout);
    if (s >= 0) {
      load_checkpoint(c.checkpoint_dir, s, ckpt_id, train_state);
      loader.seek(train_state.data);
      first_step = s;
      mb = loader.next(s);  // the batch of step s
    } else {
      resume_found_none = true;
    }
  }
  if (p.world.rank == 0 && on_start) {
    on_start(RunStart{p.model.name, p.world.world_size, world->backend_name(), p.plan.shape.stages,
                      first_step, resume_found_none});
  }

  const double samples_per_step = static_cast<double>(c.batch_size) * c.dp;
  PredictionGather predictions;  // --forward-only --outputs
  for (std::int64_t step = first_step; step < c.steps; ++step) {
    if (step > first_step) mb = loader.next(step);
    const auto t0 = Clock::now();
    const auto r = interp.run_step(step, mb.xs, mb.ys);
    if (!c.outputs_path.empty()) predictions.add(step - first_step, interp.predictions());
    std::string nonfinite;  // Note [Non-finite steps]
    const double loss = all_reduce_loss_checked(*world, r.has_loss ? r.loss : 0.0, r.nonfinite,
                                                step, timeout, &nonfinite);
    PW_CHECK(nonfinite.empty() || c.nan_policy != sched::NanPolicy::kError, NumericalError,
             nonfinite << " (--nan-policy error: stopped before the step was applied; lower --lr, "
                          "or --nan-policy skip-step to skip such steps)");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (p.world.rank == 0) {
      StepLog log{step, c.steps, loss / c.dp, ms, samples_per_step / (ms / 1000.0), nonfinite};
      result.steps.push_back(log);
      if (on_step) on_step(log);
    }
    if (!c.checkpoint_dir.empty() &&
        ((c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0) || step + 1 == c.steps)) {
      train_state.completed_steps = step + 1;
      train_state.data = loader.position();  // the next batch training takes
      save_checkpoint(c.checkpoint_dir, train_state, ckpt_id, *world, timeout);
    }
  }
  if (dp_algo) result.data_parallel = dp_algo->stats();
  if (!c.outputs_path.empty()) {
    predictions.write(*world, p.world.rank, p.world.world_size, c.steps - first_step,
                      c.microbatches, c.outputs_path, timeout);
    if (p.world.rank == 0) result.written_files.push_back(c.outputs_path);
  }
  if (!c.save_path.empty()) {
    save_weights(c, p, *world, bodies, timeout, 0, c.save_path);
    if (p.world.rank == 0) result.written_files.push_back(c.save_path);
    for (int d = 0; c.save_replicas && d < c.dp; ++d) {
      const std::string path = replica_weights_path(c.save_path, d);
      save_weights(c, p, *world, bodies, timeout, d, path);
      if (p.world.rank == mesh_world_rank(0, d, c.pp)) result.written_files.push_back(path);
    }
  }
  if (iopts.record_timings)
    write_measurements(c, p, *world, interp, bodies, loader.waits(), timeout, baseline_rss,
                       &result);
  world->barrier(OpContext{c.steps, -1, -1, "final barrier"})->wait(timeout);
  return result;
}

// Note [Naming the unresponsive rank]: a Gloo collective among more than two ranks cannot say
// which peer stopped (it lists candidates), and a receive that times out names the peer it
// waits for, which may itself be waiting for the rank that hung. The TCP store knows better:
// every rank pings it twice a second, and the server notes connections that closed unfinished.
// On a timeout or a peer failure, the ranks it has not heard from for 2 s (SIGSTOPped, hung) or
// that left (died) are named in the message. If the store itself does not answer or is gone, its
// host, rank 0, is the one that stopped or died. A failing rank 0 keeps the store up until the
// others have left (let_peers_ask, at most 1 s) so they can still ask; and every rank keeps the
// ranks gone as of its last ping, for when the store is gone by the time it asks.
std::string naming_unresponsive(Store& store, int self, const std::string& what) {
  std::vector<int> silent;
  bool host_silent = false;
  try {
    // A dead peer's connections close together, but the store may see its close a moment after
    // this rank saw the peer's: ask again once before concluding that nobody is silent.
    for (int attempt = 0; attempt < 2 && silent.empty(); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int r : store.unresponsive_ranks(std::chrono::milliseconds(2000))) {
        if (r != self) silent.push_back(r);
      }
    }
  } catch (const Error&) {  // the store does not answer (TimeoutError) or is gone (PeerError)
    host_silent = self != 0;
  }
  if (host_silent) silent.push_back(0);
  if (silent.empty()) return what;
  std::string list;
  for (int r : silent) list += (list.empty() ? "" : ",") + std::to_string(r);
  return what + "; not responding: rank" + (silent.size() > 1 ? "s " : " ") + list +
         " (hung, stopped or dead: no sign of life at the rendezvous store for over 2 s)";
}

// Rank 0 hosts the store: when it fails, it keeps the store up until every other rank has left
// (at most 1 s), so that they can still ask it who failed first. Without this, a rank whose own
// error came a moment later found the store gone and could only name rank 0.
void let_peers_ask(Store& store, int world_size) {
  const auto until = Clock::now() + std::chrono::seconds(1);
  try {
    while (Clock::now() < until &&
           static_cast<int>(store.unresponsive_ranks(std::chrono::hours(1)).size()) <
               world_size - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const Error&) {
  }
}

template <typename E>
[[noreturn]] void rethrow_naming_unresponsive(Store& store, int self, int world_size, const E& e) {
  E named(naming_unresponsive(store, self, e.what()));
  if (self == 0) let_peers_ask(store, world_size);
  throw named;
}

}  // namespace

RunResult run_training(const RunConfig& c, const std::function<void(const StepLog&)>& on_step,
                       const std::function<void(const RunStart&)>& on_start) {
  std::unique_ptr<Store> store;
  int self = -1;
  try {
    return train(c, on_step, on_start, store, self);
  } catch (const TimeoutError& e) {
    if (store) rethrow_naming_unresponsive(*store, self, c.pp * c.dp, e);
    throw;
  } catch (const PeerError& e) {
    if (store) rethrow_naming_unresponsive(*store, self, c.pp * c.dp, e);
    throw;
  }
}

}  // namespace pipewright::exec
