// What a run writes at its end (run_outputs.hpp): forward-only outputs, weights, trace and profile.
#include "runtime/run_outputs.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "data/file_io.hpp"
#include "data/npy.hpp"
#include "data/safetensors.hpp"
#include "dp/mesh.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/schedule.hpp"

namespace pipewright::exec {

namespace {

// Tags of the world-communicator messages after training.
constexpr std::int64_t kTagRecordSize = 101;
constexpr std::int64_t kTagRecord = 102;
constexpr std::int64_t kTagParamMetaSize = 103;
constexpr std::int64_t kTagParamMeta = 104;
constexpr std::int64_t kTagParamData = 105;  // float32 data; + 1: int64 data
constexpr std::int64_t kTagMeta = 111;       // --outputs
constexpr std::int64_t kTagData = 112;

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

}  // namespace

void PredictionGather::add(std::int64_t step, const std::vector<torch::Tensor>& per_microbatch) {
  for (std::size_t mb = 0; mb < per_microbatch.size(); ++mb) {
    const auto& t = per_microbatch[mb];
    if (!t.defined()) continue;
    keys_.emplace_back(step, static_cast<std::int64_t>(mb));
    values_.push_back(t.detach().to(torch::kCPU, torch::kFloat).contiguous());
  }
}

void PredictionGather::write(Communicator& world, int world_rank, int world_size,
                             std::int64_t steps, int m, const std::string& path,
                             std::chrono::milliseconds timeout) {
  const OpContext ctx{-1, -1, -1, "gather --outputs"};
  if (world_rank != 0) {
    // [count, then per tensor: step, microbatch, ndim, dims...]
    std::vector<std::int64_t> meta{static_cast<std::int64_t>(values_.size())};
    for (std::size_t i = 0; i < values_.size(); ++i) {
      meta.push_back(keys_[i].first);
      meta.push_back(keys_[i].second);
      meta.push_back(values_[i].dim());
      for (auto d : values_[i].sizes()) meta.push_back(d);
    }
    std::int64_t n = static_cast<std::int64_t>(meta.size());
    world.send(i64_view(&n, 1), 0, kTagMeta, ctx)->wait(timeout);
    world.send(i64_view(meta.data(), meta.size()), 0, kTagMeta + 2, ctx)->wait(timeout);
    for (auto& v : values_) {
      if (v.numel() == 0) continue;
      world
          .send(BufferView{v.data_ptr(), static_cast<std::size_t>(v.numel()), DType::kFloat32, {}},
                0, kTagData, ctx)
          ->wait(timeout);
    }
    return;
  }
  std::map<std::pair<std::int64_t, std::int64_t>, torch::Tensor> all;
  for (std::size_t i = 0; i < values_.size(); ++i) all[keys_[i]] = values_[i];
  for (int src = 1; src < world_size; ++src) {
    std::int64_t n = 0;
    world.recv(i64_view(&n, 1), src, kTagMeta, ctx)->wait(timeout);
    PW_ASSERT(n >= 1 && n < (std::int64_t{1} << 30), "bad --outputs message size " << n);
    std::vector<std::int64_t> meta(static_cast<std::size_t>(n));
    world.recv(i64_view(meta.data(), meta.size()), src, kTagMeta + 2, ctx)->wait(timeout);
    std::size_t i = 0;
    const std::int64_t count = meta.at(i++);
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t step = meta.at(i++);
      const std::int64_t mb = meta.at(i++);
      const std::int64_t dims = meta.at(i++);
      std::vector<std::int64_t> shape;
      for (std::int64_t d = 0; d < dims; ++d) shape.push_back(meta.at(i++));
      auto t = torch::empty(shape, torch::kFloat);
      if (t.numel() > 0) {
        world
            .recv(
                BufferView{t.data_ptr(), static_cast<std::size_t>(t.numel()), DType::kFloat32, {}},
                src, kTagData, ctx)
            ->wait(timeout);
      }
      all[{step, mb}] = t;
    }
  }
  std::vector<torch::Tensor> ordered;
  for (std::int64_t s = 0; s < steps; ++s) {
    for (int mb = 0; mb < m; ++mb) {
      const auto it = all.find({s, mb});
      PW_ASSERT(it != all.end(), "--outputs: no prediction of step " << s << " microbatch " << mb);
      ordered.push_back(it->second);
    }
  }
  const auto out = torch::cat(ordered).contiguous();
  NpyArray array;
  array.type = NpyType::kFloat32;
  array.shape = out.sizes().vec();
  array.f32.assign(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  save_npy(path, array);
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
                        const std::vector<DataWait>& data_waits,
                        const std::vector<DataParallelStep>& dp_steps,
                        std::chrono::milliseconds timeout, const MemoryBaseline& baseline,
                        RunResult* result) {
  RankRecord rec;
  rec.world_rank = p.world.rank;
  rec.peak_rss_bytes = peak_rss_bytes();
  rec.baseline_rss_bytes = baseline.rss_bytes;
  rec.baseline_state_bytes = baseline.state_bytes;
  rec.baseline_file_bytes = baseline.file_bytes;
  rec.file_bytes = resident_file_bytes();
  rec.host_id = this_host_id();
  rec.cpus = p.device.is_cuda() ? 0 : usable_cpus();
  rec.node_rank = p.world.node_rank;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    LocalStageSizes sz;
    sz.stage = p.plan.shape.stages_of_rank(p.pp_index).at(i);
    for (const auto& t : bodies[i]->parameters()) {
      sz.param_bytes.push_back(t.numel() * static_cast<std::int64_t>(t.element_size()));
    }
    rec.stages.push_back(sz);
  }
  for (const auto& t : interp.timings()) {
    rec.actions.push_back(TimedAction{t.action, t.step, t.start_ns, t.end_ns, t.bytes, t.send_ns,
                                      t.drain_ns, t.cpu_ns});
  }
  if (p.world.world_size > p.plan.shape.ranks) {  // dp > 1: Note [Data-parallel sync]
    for (const auto& y : interp.sync_timings())
      rec.dp_syncs.push_back(DataParallelSync{y.step, y.start_ns, y.end_ns});
  }
  rec.data_waits = data_waits;
  rec.dp_steps = dp_steps;
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
  ctx.precision = c.precision;  // the profile records it (simulate refuses another)
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

}  // namespace pipewright::exec
