#include "runtime/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <system_error>
#include <vector>

#include "data/file_io.hpp"
#include "pipewright/graph/error.hpp"
#include "zero/zero_reshard.hpp"

namespace pipewright::exec {

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kFormatVersion = 1;
constexpr const char* kCompleteMarker = "COMPLETE";
constexpr int kKeepCheckpoints = 2;

std::string stage_key(std::size_t i, const char* what) {
  return "stage" + std::to_string(i) + "." + what;
}

torch::Tensor meta_tensor(const TrainingState& s, const CheckpointIdentity& id) {
  std::int64_t fp;
  static_assert(sizeof fp == sizeof id.fingerprint);
  std::memcpy(&fp, &id.fingerprint, sizeof fp);
  return torch::tensor(
      {kFormatVersion, s.completed_steps, s.data.epoch, s.data.offset,
       static_cast<std::int64_t>(id.world_rank), static_cast<std::int64_t>(id.world_size), fp,
       static_cast<std::int64_t>(s.stages.size())},
      torch::kLong);
}

// Parses "step-<digits>" into the step, or -1.
std::int64_t step_of_dir_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5) return -1;
  std::int64_t v = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
    if (v > (std::int64_t{1} << 50)) return -1;
  }
  return v;
}

std::vector<std::int64_t> complete_steps(const std::string& dir) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of_dir_name(entry.path().filename().string());
    if (step < 0) continue;
    if (fs::exists(entry.path() / kCompleteMarker, ec)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void copy_into(torch::Tensor& dst, const torch::Tensor& src, const std::string& what,
               const std::string& name) {
  PW_CHECK(src.sizes() == dst.sizes() && src.scalar_type() == dst.scalar_type(), ConfigError,
           name << ": " << what << " has shape " << src.sizes() << " " << src.scalar_type()
                << ", the model has " << dst.sizes() << " " << dst.scalar_type()
                << " (checkpoint of another model?)");
  torch::NoGradGuard no_grad;
  dst.detach().copy_(src);
}

// ZeRO-3 (zero/zero3.hpp): a trainable parameter is saved as part of this replica's parameter
// shard (the data-parallel state's 'dp.param_shard.stage<S>'), not whole.
bool in_param_shard(const TrainingState& s, const torch::Tensor& p) {
  return s.zero_stage == 3 && p.requires_grad();
}

std::string shard_sizes(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : ", ") + std::to_string(v[i]);
  return s + "]";
}

std::string describe_zero(std::int64_t z) {
  return z == 0 ? "whole (--zero-stage 0)"
                : "a ZeRO-" + std::to_string(z) + " shard (--zero-stage " + std::to_string(z) + ")";
}

// Before the fingerprint (which only says "another configuration"): the checks that can name
// the stage and the tensor -- the ZeRO stage of the optimizer state, then every parameter's and
// buffer's shape. Reads only; nothing is copied until the whole file is known to fit.
// `resharding` (Note [Resuming at another dp]): ZeRO-3's parameter shards are of the saved dp's
// size; reshard_zero_state checks them bucket by bucket instead.
void check_layout(torch::serialize::InputArchive& ar, const std::string& name,
                  const TrainingState& s, bool resharding) {
  try {
    torch::Tensor zero;
    const std::int64_t saved =
        ar.try_read("zero", zero) && zero.numel() == 1 ? zero.item<std::int64_t>() : 0;
    if (saved != s.zero_stage && !s.stages.empty()) {
      throw ConfigError(name + ": stage " + std::to_string(s.stages[0].stage) +
                        ": optimizer state '" + stage_key(0, "optimizer") + "' is " +
                        describe_zero(saved) + ", this run has --zero-stage " +
                        std::to_string(s.zero_stage) + " (resume with --zero-stage " +
                        std::to_string(saved) + ")");
    }
    for (std::size_t i = 0; i < s.stages.size(); ++i) {
      const StageParams& sp = s.stages[i];
      const auto check = [&](const std::string& key, const torch::Tensor& live, bool buffer) {
        torch::Tensor t;
        if (!ar.try_read(key, t, buffer)) {
          throw ConfigError(name + ": stage " + std::to_string(sp.stage) + ": tensor '" + key +
                            "' is missing (checkpoint of another model?)");
        }
        if (t.sizes() != live.sizes() || t.scalar_type() != live.scalar_type()) {
          std::ostringstream msg;
          msg << name << ": stage " << sp.stage << ": tensor '" << key << "' has shape "
              << t.sizes() << " " << t.scalar_type() << ", the model has " << live.sizes() << " "
              << live.scalar_type() << " (checkpoint of another model?)";
          throw ConfigError(msg.str());
        }
      };
      for (std::size_t j = 0; j < sp.params.size(); ++j) {
        if (!in_param_shard(s, sp.params[j]))
          check(stage_key(i, "param") + std::to_string(j), sp.params[j], false);
      }
      for (std::size_t j = 0; j < sp.buffers.size(); ++j)
        check(stage_key(i, "buffer") + std::to_string(j), sp.buffers[j], true);
    }
    if (s.zero_stage == 3 && s.dp_algorithm != nullptr && resharding) {
      // Shards of another dp: their buckets' elements (which do not depend on dp) must be this
      // run's, else the parameter shard belongs to another model.
      const auto live_state = s.dp_algorithm->state();
      for (const auto& [key, live] : live_state) {
        if (key.rfind("layout.stage", 0) != 0) continue;
        const std::string stage = key.substr(12);
        torch::Tensor t;
        const std::vector<std::int64_t> mine =
            parse_shard_layout(live, "this run's " + key).elements;
        std::vector<std::int64_t> saved;
        if (ar.try_read("dp." + key, t))
          saved = parse_shard_layout(t, name + ": 'dp." + key + "'").elements;
        if (saved == mine) continue;
        std::ostringstream msg;
        msg << name << ": stage " << stage << ": tensor 'dp.param_shard.stage" << stage
            << "' holds buckets of " << shard_sizes(saved) << " elements, this run's of "
            << shard_sizes(mine) << " (checkpoint of another model?)";
        throw ConfigError(msg.str());
      }
    }
    if (s.zero_stage == 3 && s.dp_algorithm != nullptr && !resharding) {  // shards, by shape
      for (const auto& [key, live] : s.dp_algorithm->state()) {
        if (key.rfind("param_shard.stage", 0) != 0) continue;
        torch::Tensor t;
        const bool found = ar.try_read("dp." + key, t);
        if (found && t.sizes() == live.sizes() && t.scalar_type() == live.scalar_type()) continue;
        std::ostringstream msg;
        msg << name << ": stage " << key.substr(17) << ": tensor 'dp." << key << "' ";
        if (found) {
          msg << "has shape " << t.sizes() << " " << t.scalar_type() << ", ";
        } else {
          msg << "is missing, ";
        }
        msg << "this run's parameter shard has " << live.sizes() << " " << live.scalar_type()
            << " (checkpoint of another model?)";
        throw ConfigError(msg.str());
      }
    }
  } catch (const c10::Error& e) {
    throw ParseError(name + ": incomplete or corrupt checkpoint (" + e.what_without_backtrace() +
                     ")");
  }
}

}  // namespace

std::string checkpoint_dir_of_step(const std::string& dir, std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return (fs::path(dir) / buf).string();
}

std::string checkpoint_file(const std::string& dir, std::int64_t step, int rank) {
  return (fs::path(checkpoint_dir_of_step(dir, step)) / ("rank-" + std::to_string(rank) + ".pt"))
      .string();
}

std::string serialize_checkpoint(const TrainingState& s, const CheckpointIdentity& id) {
  torch::serialize::OutputArchive ar;
  ar.write("meta", meta_tensor(s, id));
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    const StageParams& sp = s.stages[i];
    ar.write(stage_key(i, "id"), torch::tensor({static_cast<std::int64_t>(sp.stage)}));
    for (std::size_t j = 0; j < sp.params.size(); ++j) {
      if (in_param_shard(s, sp.params[j])) continue;
      ar.write(stage_key(i, "param") + std::to_string(j), sp.params[j].detach());
    }
    for (std::size_t j = 0; j < sp.buffers.size(); ++j) {
      ar.write(stage_key(i, "buffer") + std::to_string(j), sp.buffers[j].detach(), true);
    }
    if (i < s.optimizers.size() && s.optimizers[i] != nullptr) {
      torch::serialize::OutputArchive opt;
      s.optimizers[i]->save(opt);
      ar.write(stage_key(i, "optimizer"), opt);
    }
  }
  if (s.dp_algorithm != nullptr) {
    for (const auto& [name, t] : s.dp_algorithm->state()) ar.write("dp." + name, t);
  }
  ar.write("zero", torch::tensor({static_cast<std::int64_t>(s.zero_stage)}, torch::kLong));
  ar.write("mesh", torch::tensor({static_cast<std::int64_t>(s.pp), static_cast<std::int64_t>(s.dp),
                                  s.batch_size},
                                 torch::kLong));
  if (s.recipe != nullptr) {
    ar.write("recipe",
             torch::tensor({s.recipe->loss_scale, static_cast<double>(s.recipe->growth_tracker)},
                           torch::kDouble));
  }
  std::ostringstream out;
  ar.save_to(out);
  return std::move(out).str();
}

namespace {

// A checkpoint file read into memory: its archive and its /meta.
struct Opened {
  torch::serialize::InputArchive ar;
  std::vector<std::int64_t> meta;
};

std::unique_ptr<Opened> open_checkpoint(const std::string& bytes, const std::string& name) {
  auto o = std::make_unique<Opened>();
  torch::Tensor meta;
  try {
    std::istringstream in(bytes);
    o->ar.load_from(in);
    o->ar.read("meta", meta);
  } catch (const c10::Error& e) {
    throw ParseError(name + ": not a pipewright checkpoint (" + e.what_without_backtrace() + ")");
  }
  PW_CHECK(meta.numel() == 8 && meta.scalar_type() == torch::kLong, ParseError,
           name << ": /meta: malformed");
  const auto* m = meta.data_ptr<std::int64_t>();
  PW_CHECK(m[0] == kFormatVersion, ParseError,
           name << ": /meta: format version " << m[0] << ", expected " << kFormatVersion);
  o->meta.assign(m, m + 8);
  return o;
}

std::unique_ptr<Opened> open_file(const std::string& path) {
  return open_checkpoint(read_file_bytes(path, "checkpoint"), path);
}

// Note [Resuming at another dp]: where the saved run's files are.
struct Reshard {
  std::string dir;
  std::int64_t step = 0;
  int pp = 1;        // the saved run's (== this run's)
  int dp = 1;        // the saved run's
  int pp_index = 0;  // this rank's pipeline rank
};

void check_fingerprint(const std::vector<std::int64_t>& m, const std::string& name,
                       const CheckpointIdentity& id) {
  std::uint64_t fp;
  std::memcpy(&fp, &m[6], sizeof fp);
  PW_CHECK(fp == id.fingerprint, ConfigError,
           name << ": written by a run with another configuration (model, plan, mesh, batch, "
                   "optimizer or data-parallel options differ)");
}

// Note [ZeRO re-sharding]: local stage i's optimizer shard from every saved replica's file of
// this pipeline rank (`first`: replica 0's, already open); under ZeRO-3 also its parameter
// shard, put into `dp_state` (with this run's layout) for the algorithm's load_state.
void reshard_zero_state(Opened& first, const std::string& first_name, const Reshard& rs,
                        const CheckpointIdentity& id, TrainingState& s, std::size_t i,
                        std::map<std::string, torch::Tensor>& dp_state) {
  const int stage = s.stages[i].stage;
  const std::string where = first_name + ": stage " + std::to_string(stage);
  const std::string key = "layout.stage" + std::to_string(stage);
  PW_CHECK(s.dp_algorithm != nullptr && s.make_optimizer, ConfigError,
           where << ": re-sharding a ZeRO optimizer needs the run's ZeRO state");
  const auto live_state = s.dp_algorithm->state();
  PW_ASSERT(live_state.count(key) != 0, "ZeRO stage " << stage << " without a layout");
  const ShardLayout live = parse_shard_layout(live_state.at(key), "this run's " + key);
  const std::string shard_key = "param_shard.stage" + std::to_string(stage);
  std::vector<std::vector<PieceState>> saved;
  std::vector<ShardLayout> layouts;
  std::vector<torch::Tensor> param_shards;  // ZeRO-3
  std::unique_ptr<torch::optim::Optimizer> options_from;
  for (int r = 0; r < rs.dp; ++r) {
    std::unique_ptr<Opened> other;
    std::string name = first_name;
    Opened* o = &first;
    if (r > 0) {
      name = checkpoint_file(rs.dir, rs.step, r * rs.pp + rs.pp_index);
      other = open_file(name);
      o = other.get();
      PW_CHECK(o->meta[4] == r * rs.pp + rs.pp_index && o->meta[5] == rs.pp * rs.dp &&
                   o->meta[1] == first.meta[1],
               ConfigError,
               name << ": written by rank " << o->meta[4] << " of " << o->meta[5] << " at step "
                    << o->meta[1] << ", expected rank " << r * rs.pp + rs.pp_index << " of "
                    << rs.pp * rs.dp << " at step " << first.meta[1]);
      check_fingerprint(o->meta, name, id);
    }
    try {
      torch::Tensor lt;
      PW_CHECK(o->ar.try_read("dp." + key, lt), ConfigError,
               name << ": stage " << stage << ": 'dp." << key
                    << "' (the ZeRO shard layout) is missing: a checkpoint written before "
                       "layouts were recorded cannot be re-sharded; resume at --dp "
                    << rs.dp);
      layouts.push_back(parse_shard_layout(lt, name));
      if (s.zero_stage == 3) {
        torch::Tensor shard;
        PW_CHECK(o->ar.try_read("dp." + shard_key, shard), ConfigError,
                 name << ": stage " << stage << ": tensor 'dp." << shard_key
                      << "' (the ZeRO-3 parameter shard) is missing (checkpoint of another "
                         "model?)");
        param_shards.push_back(shard);
      }
      std::vector<torch::Tensor> pieces;
      for (std::int64_t q : layouts.back().piece) pieces.push_back(torch::zeros({q}));
      auto opt = s.make_optimizer(std::move(pieces));
      torch::serialize::InputArchive opt_ar;
      o->ar.read(stage_key(i, "optimizer"), opt_ar);
      opt->load(opt_ar);
      saved.push_back(optimizer_piece_states(*opt));
      if (r == 0) options_from = std::move(opt);
    } catch (const c10::Error& e) {
      throw ParseError(name + ": incomplete or corrupt checkpoint (" + e.what_without_backtrace() +
                       ")");
    }
  }
  if (s.zero_stage == 3) {  // the parameters first: their errors name the tensor
    PW_ASSERT(live_state.count(shard_key) != 0, "ZeRO-3 stage " << stage << " without a shard");
    torch::Tensor shard =
        reshard_flat_shard(param_shards, layouts, live, where + ": tensor 'dp." + shard_key + "'");
    const torch::Tensor& live_shard = live_state.at(shard_key);
    PW_CHECK(shard.sizes() == live_shard.sizes() && shard.scalar_type() == live_shard.scalar_type(),
             ConfigError,
             where << ": tensor 'dp." << shard_key << "' re-sharded has shape " << shard.sizes()
                   << " " << shard.scalar_type() << ", this run's parameter shard has "
                   << live_shard.sizes() << " " << live_shard.scalar_type()
                   << " (checkpoint of another model?)");
    dp_state[key] = live_state.at(key);
    dp_state[shard_key] = std::move(shard);
  }
  torch::optim::Optimizer& mine = *s.optimizers[i];
  set_optimizer_piece_states(mine, reshard_piece_states(saved, layouts, live, where));
  mine.param_groups().at(0).set_options(options_from->param_groups().at(0).options().clone());
}

void parse_opened(Opened& o, const std::string& name, const CheckpointIdentity& id,
                  TrainingState& s, const Reshard* rs) {
  const std::vector<std::int64_t>& m = o.meta;
  torch::serialize::InputArchive& ar = o.ar;
  if (rs == nullptr) {
    PW_CHECK(m[4] == id.world_rank && m[5] == id.world_size, ConfigError,
             name << ": written by rank " << m[4] << " of " << m[5] << ", this is rank "
                  << id.world_rank << " of " << id.world_size
                  << " (resuming needs the same world size)");
  } else {
    PW_CHECK(m[4] == rs->pp_index && m[5] == rs->pp * rs->dp, ConfigError,
             name << ": written by rank " << m[4] << " of " << m[5] << ", expected rank "
                  << rs->pp_index << " of " << rs->pp * rs->dp);
  }
  check_layout(ar, name, s, rs != nullptr);
  check_fingerprint(m, name, id);
  PW_CHECK(m[7] == static_cast<std::int64_t>(s.stages.size()), ConfigError,
           name << ": holds " << m[7] << " stages, this rank has " << s.stages.size());
  std::map<std::string, torch::Tensor> resharded;  // ZeRO-3 at another dp: the algorithm's state
  try {
    for (std::size_t i = 0; i < s.stages.size(); ++i) {
      StageParams& sp = s.stages[i];
      torch::Tensor sid;
      ar.read(stage_key(i, "id"), sid);
      PW_CHECK(sid.item<std::int64_t>() == sp.stage, ConfigError,
               name << ": local stage " << i << " is stage " << sid.item<std::int64_t>()
                    << ", expected " << sp.stage);
      for (std::size_t j = 0; j < sp.params.size(); ++j) {
        if (in_param_shard(s, sp.params[j])) continue;
        torch::Tensor t;
        const std::string key = stage_key(i, "param") + std::to_string(j);
        ar.read(key, t);
        copy_into(sp.params[j], t, key, name);
      }
      for (std::size_t j = 0; j < sp.buffers.size(); ++j) {
        torch::Tensor t;
        const std::string key = stage_key(i, "buffer") + std::to_string(j);
        ar.read(key, t, true);
        copy_into(sp.buffers[j], t, key, name);
      }
      if (i < s.optimizers.size() && s.optimizers[i] != nullptr) {
        if (rs != nullptr && s.zero_stage > 0) {
          reshard_zero_state(o, name, *rs, id, s, i, resharded);
        } else {  // this rank's own state, or (another dp, --zero-stage 0) the replicated one
          torch::serialize::InputArchive opt;
          ar.read(stage_key(i, "optimizer"), opt);
          s.optimizers[i]->load(opt);
        }
      }
    }
    if (s.dp_algorithm != nullptr && rs != nullptr && !resharded.empty()) {
      s.dp_algorithm->load_state(resharded);
    }
    if (s.dp_algorithm != nullptr && rs == nullptr) {
      std::map<std::string, torch::Tensor> st;
      for (const auto& [key, live] : s.dp_algorithm->state()) {
        torch::Tensor t;
        if (ar.try_read("dp." + key, t)) st[key] = t;
      }
      s.dp_algorithm->load_state(st);
    }
    torch::Tensor recipe;
    if (s.recipe != nullptr && ar.try_read("recipe", recipe)) {
      PW_CHECK(recipe.numel() == 2 && recipe.scalar_type() == torch::kDouble, ParseError,
               name << ": /recipe: malformed");
      s.recipe->loss_scale = recipe[0].item<double>();
      s.recipe->growth_tracker = static_cast<std::int64_t>(recipe[1].item<double>());
    }
  } catch (const c10::Error& e) {
    throw ParseError(name + ": incomplete or corrupt checkpoint (" + e.what_without_backtrace() +
                     ")");
  }
  s.completed_steps = m[1];
  s.data = DataPosition{m[2], m[3]};
  s.loaded_dp = rs == nullptr ? s.dp : rs->dp;
}

}  // namespace

void parse_checkpoint(const std::string& bytes, const std::string& name,
                      const CheckpointIdentity& id, TrainingState& s) {
  auto o = open_checkpoint(bytes, name);
  parse_opened(*o, name, id, s, nullptr);
}

void save_checkpoint(const std::string& dir, const TrainingState& state,
                     const CheckpointIdentity& id, Communicator& world,
                     std::chrono::milliseconds timeout) {
  const std::string step_dir = checkpoint_dir_of_step(dir, state.completed_steps);
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  PW_CHECK(!ec, ConfigError,
           "--checkpoint-dir: cannot create '" << step_dir << "': " << ec.message());
  write_file_atomically(checkpoint_file(dir, state.completed_steps, id.world_rank),
                        serialize_checkpoint(state, id));
  OpContext ctx;
  ctx.step = state.completed_steps;
  ctx.what = "checkpoint barrier";
  world.barrier(ctx)->wait(timeout);
  if (id.world_rank != 0) return;
  // Note [Checkpoint order]: every rank's file is written (and fsynced) before the barrier, the
  // marker after it, so a COMPLETE marker always stands beside every rank's file. Pruning removes
  // the marker first, so a prune killed midway leaves an incomplete step (ignored by resume), never
  // a marker without its files.
  write_file_atomically((fs::path(step_dir) / kCompleteMarker).string(), "complete\n");
  const auto steps = complete_steps(dir);
  if (steps.size() > static_cast<std::size_t>(kKeepCheckpoints)) {
    const std::int64_t keep_from = steps[steps.size() - kKeepCheckpoints];
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::int64_t step = step_of_dir_name(entry.path().filename().string());
      if (step < 0 || step >= keep_from) continue;
      fs::remove(entry.path() / kCompleteMarker, ec);
      fs::remove_all(entry.path(), ec);
    }
  }
}

std::int64_t remove_stale_temporaries(const std::string& dir, int world_rank) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  const std::string mine = "rank-" + std::to_string(world_rank) + ".pt.tmp.";
  const std::string marker = std::string(kCompleteMarker) + ".tmp.";
  std::int64_t removed = 0;
  for (const auto& step_dir : fs::directory_iterator(dir, ec)) {
    if (step_of_dir_name(step_dir.path().filename().string()) < 0) continue;
    std::error_code inner;
    for (const auto& entry : fs::directory_iterator(step_dir.path(), inner)) {
      const std::string name = entry.path().filename().string();
      const bool stale =
          name.rfind(mine, 0) == 0 || (world_rank == 0 && name.rfind(marker, 0) == 0);
      if (stale && fs::remove(entry.path(), inner)) ++removed;
    }
  }
  return removed;
}

std::int64_t latest_complete_checkpoint(const std::string& dir, int world_rank) {
  const auto steps = complete_steps(dir);
  std::error_code ec;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    // Another world size (Note [Resuming at another dp]): the files of a smaller world.
    if (fs::exists(checkpoint_file(dir, *it, world_rank), ec) ||
        fs::exists(checkpoint_file(dir, *it, 0), ec))
      return *it;
  }
  return -1;
}

std::int64_t agree_resume_step(const std::string& dir, int world_rank, Communicator& world,
                               std::chrono::milliseconds timeout) {
  std::int64_t step = latest_complete_checkpoint(dir, world_rank);
  OpContext ctx;
  ctx.what = "--resume: agreeing on the checkpoint";
  world.all_reduce(BufferView{&step, 1, DType::kInt64, {}}, ReduceOp::kMin, ctx)->wait(timeout);
  return step;
}

void load_checkpoint(const std::string& dir, std::int64_t step, const CheckpointIdentity& id,
                     TrainingState& state) {
  std::string path = checkpoint_file(dir, step, id.world_rank);
  std::error_code ec;
  std::unique_ptr<Opened> o;
  const auto saved_mesh = [](Opened& f, torch::Tensor& mesh) {
    try {
      return f.ar.try_read("mesh", mesh) && mesh.numel() == 3;
    } catch (const c10::Error&) {
      return false;
    }
  };
  if (fs::exists(path, ec)) {
    o = open_file(path);
    torch::Tensor m;
    const bool same_mesh = !saved_mesh(*o, m) || (m[0].item<std::int64_t>() == state.pp &&
                                                  m[1].item<std::int64_t>() == state.dp);
    if (o->meta[5] == id.world_size && same_mesh) {
      parse_opened(*o, path, id, state, nullptr);
      PW_CHECK(state.completed_steps == step, ConfigError,
               path << ": holds step " << state.completed_steps << ", expected " << step);
      return;
    }
  }
  // Note [Resuming at another dp]: written at another world size.
  const std::string first = checkpoint_file(dir, step, 0);
  if (id.world_rank != 0 || !o) o = open_file(first);
  torch::Tensor mesh;
  PW_CHECK(saved_mesh(*o, mesh), ConfigError,
           first << ": written by a world of " << o->meta[5] << " ranks, this run has "
                 << id.world_size
                 << " (resuming needs the same world size: this checkpoint records no mesh)");
  const torch::Tensor mesh_long = mesh.to(torch::kLong).contiguous();
  const auto* v = mesh_long.data_ptr<std::int64_t>();
  const std::int64_t saved_pp = v[0], saved_dp = v[1], saved_batch = v[2];
  PW_CHECK(saved_pp == state.pp && saved_pp * saved_dp == o->meta[5], ConfigError,
           first << ": written at --pp " << saved_pp << " --dp " << saved_dp
                 << ", this run has --pp " << state.pp << " --dp " << state.dp
                 << ": a resume may change --dp only (re-sharding on load keeps the pipeline "
                    "stages and their ranks)");
  PW_CHECK(
      saved_batch * saved_dp == state.batch_size * state.dp, ConfigError,
      first << ": written at --dp " << saved_dp << " --batch-size " << saved_batch
            << " (a global batch of " << saved_batch * saved_dp << " samples), this run has --dp "
            << state.dp << " --batch-size " << state.batch_size << " ("
            << state.batch_size * state.dp << "): a resume at another --dp keeps the global batch"
            << ((saved_batch * saved_dp) % state.dp == 0
                    ? " (--batch-size " + std::to_string(saved_batch * saved_dp / state.dp) + ")"
                    : std::string()));
  PW_CHECK(
      state.dp_algorithm == nullptr || state.zero_stage > 0 || state.dp_algorithm->state().empty(),
      ConfigError,
      first << ": written at --dp " << saved_dp << ", this run has --dp " << state.dp
            << ": the data-parallel algorithm keeps per-replica state, which does not "
               "re-shard (resume at --dp "
            << saved_dp << ", or use --dp-algorithm ddp)");
  Reshard rs;
  rs.dir = dir;
  rs.step = step;
  rs.pp = static_cast<int>(saved_pp);
  rs.dp = static_cast<int>(saved_dp);
  rs.pp_index = id.world_rank % state.pp;
  path = checkpoint_file(dir, step, rs.pp_index);
  if (rs.pp_index != 0) o = open_file(path);
  parse_opened(*o, path, id, state, &rs);
  PW_CHECK(state.completed_steps == step, ConfigError,
           path << ": holds step " << state.completed_steps << ", expected " << step);
}

}  // namespace pipewright::exec
