#include "runtime/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "data/file_io.hpp"
#include "pipewright/graph/error.hpp"

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

std::string describe_zero(std::int64_t z) {
  return z == 0 ? "whole (--zero-stage 0)"
                : "a ZeRO-" + std::to_string(z) + " shard (--zero-stage " + std::to_string(z) + ")";
}

// Before the fingerprint (which only says "another configuration"): the checks that can name
// the stage and the tensor -- the ZeRO stage of the optimizer state, then every parameter's and
// buffer's shape. Reads only; nothing is copied until the whole file is known to fit.
void check_layout(torch::serialize::InputArchive& ar, const std::string& name,
                  const TrainingState& s) {
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
    if (s.zero_stage == 3 && s.dp_algorithm != nullptr) {  // the parameter shards, by shape
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
  if (s.recipe != nullptr) {
    ar.write("recipe",
             torch::tensor({s.recipe->loss_scale, static_cast<double>(s.recipe->growth_tracker)},
                           torch::kDouble));
  }
  std::ostringstream out;
  ar.save_to(out);
  return std::move(out).str();
}

void parse_checkpoint(const std::string& bytes, const std::string& name,
                      const CheckpointIdentity& id, TrainingState& s) {
  torch::serialize::InputArchive ar;
  torch::Tensor meta;
  try {
    std::istringstream in(bytes);
    ar.load_from(in);
    ar.read("meta", meta);
  } catch (const c10::Error& e) {
    throw ParseError(name + ": not a pipewright checkpoint (" + e.what_without_backtrace() + ")");
  }
  PW_CHECK(meta.numel() == 8 && meta.scalar_type() == torch::kLong, ParseError,
           name << ": /meta: malformed");
  const auto* m = meta.data_ptr<std::int64_t>();
  PW_CHECK(m[0] == kFormatVersion, ParseError,
           name << ": /meta: format version " << m[0] << ", expected " << kFormatVersion);
  PW_CHECK(m[4] == id.world_rank && m[5] == id.world_size, ConfigError,
           name << ": written by rank " << m[4] << " of " << m[5] << ", this is rank "
                << id.world_rank << " of " << id.world_size
                << " (resuming needs the same world size)");
  check_layout(ar, name, s);
  std::uint64_t fp;
  std::memcpy(&fp, &m[6], sizeof fp);
  PW_CHECK(fp == id.fingerprint, ConfigError,
           name << ": written by a run with another configuration (model, plan, mesh, batch, "
                   "optimizer or data-parallel options differ)");
  PW_CHECK(m[7] == static_cast<std::int64_t>(s.stages.size()), ConfigError,
           name << ": holds " << m[7] << " stages, this rank has " << s.stages.size());
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
        torch::serialize::InputArchive opt;
        ar.read(stage_key(i, "optimizer"), opt);
        s.optimizers[i]->load(opt);
      }
    }
    if (s.dp_algorithm != nullptr) {
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
    if (fs::exists(checkpoint_file(dir, *it, world_rank), ec)) return *it;
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
  const std::string path = checkpoint_file(dir, step, id.world_rank);
  parse_checkpoint(read_file_bytes(path, "checkpoint"), path, id, state);
  PW_CHECK(state.completed_steps == step, ConfigError,
           path << ": holds step " << state.completed_steps << ", expected " << step);
}

}  // namespace pipewright::exec
