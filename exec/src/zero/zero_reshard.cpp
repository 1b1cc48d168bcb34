// Re-sharding a ZeRO optimizer's state (zero_reshard.hpp: Note [ZeRO re-sharding]).
#include "zero/zero_reshard.hpp"

#include <memory>
#include <string>
#include <utility>

#include "compat/torch_compat.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

// Adam and AdamW: the two moments, AMSGrad's maximum when kept, the step.
template <typename AdamState>
PieceState from_adam(const AdamState& s) {
  PieceState out;
  out.present = true;
  out.step = s.step();
  out.fields["exp_avg"] = s.exp_avg();
  out.fields["exp_avg_sq"] = s.exp_avg_sq();
  if (s.max_exp_avg_sq().defined()) out.fields["max_exp_avg_sq"] = s.max_exp_avg_sq();
  return out;
}

template <typename AdamState>
std::unique_ptr<torch::optim::OptimizerParamState> to_adam(const PieceState& p) {
  auto s = std::make_unique<AdamState>();
  s->step(p.step);
  s->exp_avg(p.fields.at("exp_avg"));
  s->exp_avg_sq(p.fields.at("exp_avg_sq"));
  if (p.fields.count("max_exp_avg_sq") != 0) s->max_exp_avg_sq(p.fields.at("max_exp_avg_sq"));
  return s;
}

enum class Kind { kAdamW, kAdam, kSgd };

Kind kind_of(torch::optim::Optimizer& opt) {
  if (dynamic_cast<torch::optim::AdamW*>(&opt) != nullptr) return Kind::kAdamW;
  if (dynamic_cast<torch::optim::Adam*>(&opt) != nullptr) return Kind::kAdam;
  if (dynamic_cast<torch::optim::SGD*>(&opt) != nullptr) return Kind::kSgd;
  throw ConfigError("re-sharding optimizer state: only AdamW, Adam and SGD are supported");
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : ", ") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

ShardLayout parse_shard_layout(const torch::Tensor& t, const std::string& where) {
  const torch::Tensor v = t.to(torch::kLong).flatten().contiguous();
  const std::int64_t n = v.numel();
  const auto* d = v.data_ptr<std::int64_t>();
  PW_CHECK(n >= 3 && d[2] >= 0 && n == 3 + 3 * d[2] && d[0] >= 1 && d[1] >= 0 && d[1] < d[0],
           ConfigError, where << ": malformed ZeRO shard layout");
  ShardLayout out;
  out.dp = d[0];
  out.rank = d[1];
  for (std::int64_t b = 0; b < d[2]; ++b) {
    out.elements.push_back(d[3 + 3 * b]);
    out.padded.push_back(d[4 + 3 * b]);
    out.piece.push_back(d[5 + 3 * b]);
    PW_CHECK(out.padded.back() == out.piece.back() * out.dp &&
                 out.elements.back() <= out.padded.back() && out.elements.back() >= 0,
             ConfigError, where << ": malformed ZeRO shard layout (bucket " << b << ")");
  }
  return out;
}

std::vector<PieceState> optimizer_piece_states(torch::optim::Optimizer& opt) {
  const Kind kind = kind_of(opt);
  std::vector<PieceState> out;
  auto& state = opt.state();
  for (const auto& p : opt.param_groups().at(0).params()) {
    const auto it = state.find(compat::optimizer_state_key(p));
    if (it == state.end()) {
      out.emplace_back();
      continue;
    }
    if (kind == Kind::kAdamW) {
      out.push_back(from_adam(static_cast<const torch::optim::AdamWParamState&>(*it->second)));
    } else if (kind == Kind::kAdam) {
      out.push_back(from_adam(static_cast<const torch::optim::AdamParamState&>(*it->second)));
    } else {
      const auto& s = static_cast<const torch::optim::SGDParamState&>(*it->second);
      PieceState ps;
      ps.present = true;
      if (s.momentum_buffer().defined()) ps.fields["momentum_buffer"] = s.momentum_buffer();
      out.push_back(std::move(ps));
    }
  }
  return out;
}

void set_optimizer_piece_states(torch::optim::Optimizer& opt,
                                const std::vector<PieceState>& states) {
  const Kind kind = kind_of(opt);
  const auto& params = opt.param_groups().at(0).params();
  PW_ASSERT(params.size() == states.size(), "re-sharding: " << states.size() << " piece states for "
                                                            << params.size() << " tensors");
  auto& state = opt.state();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto key = compat::optimizer_state_key(params[i]);
    state.erase(key);
    const PieceState& p = states[i];
    if (!p.present) continue;
    if (kind == Kind::kAdamW) {
      state[key] = to_adam<torch::optim::AdamWParamState>(p);
    } else if (kind == Kind::kAdam) {
      state[key] = to_adam<torch::optim::AdamParamState>(p);
    } else {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      if (p.fields.count("momentum_buffer") != 0)
        s->momentum_buffer(p.fields.at("momentum_buffer"));
      state[key] = std::move(s);
    }
  }
}

std::vector<PieceState> reshard_piece_states(const std::vector<std::vector<PieceState>>& saved,
                                             const std::vector<ShardLayout>& layouts,
                                             const ShardLayout& live, const std::string& where) {
  PW_ASSERT(saved.size() == layouts.size() && !saved.empty(), "re-sharding: no saved pieces");
  const auto d = static_cast<std::int64_t>(saved.size());
  for (std::int64_t r = 0; r < d; ++r) {
    const ShardLayout& l = layouts[static_cast<std::size_t>(r)];
    PW_CHECK(l.dp == d && l.rank == r, ConfigError,
             where << ": the file of saved replica " << r << " holds the shard of replica "
                   << l.rank << " of " << l.dp << " (checkpoint files of different runs?)");
    PW_CHECK(l.elements == live.elements, ConfigError,
             where << ": the saved buckets hold " << join(l.elements)
                   << " elements, this run's hold " << join(live.elements)
                   << " (another model or --bucket-cap-mb?)");
    PW_CHECK(saved[static_cast<std::size_t>(r)].size() == l.elements.size(), ConfigError,
             where << ": saved replica " << r << " holds optimizer state for "
                   << saved[static_cast<std::size_t>(r)].size() << " tensors, its layout has "
                   << l.elements.size() << " buckets");
  }
  std::vector<PieceState> out;
  for (std::size_t b = 0; b < live.elements.size(); ++b) {
    const PieceState& first = saved[0][b];
    PieceState mine;
    mine.present = first.present;
    mine.step = first.step;
    for (std::int64_t r = 1; r < d; ++r) {
      const PieceState& other = saved[static_cast<std::size_t>(r)][b];
      PW_CHECK(other.present == first.present && other.step == first.step &&
                   other.fields.size() == first.fields.size(),
               ConfigError,
               where << ": bucket " << b << ": the optimizer state of saved replica " << r
                     << " (step " << other.step << ") disagrees with replica 0's (step "
                     << first.step << ")");
    }
    const std::int64_t n = live.elements[b];
    for (const auto& [field, t0] : first.fields) {
      std::vector<torch::Tensor> pieces;
      for (std::int64_t r = 0; r < d; ++r) {
        const auto& fields = saved[static_cast<std::size_t>(r)][b].fields;
        const auto it = fields.find(field);
        PW_CHECK(it != fields.end() &&
                     it->second.numel() == layouts[static_cast<std::size_t>(r)].piece[b],
                 ConfigError,
                 where << ": bucket " << b << ": saved replica " << r << "'s '" << field
                       << "' is missing or not its piece's size");
        pieces.push_back(it->second.detach().flatten());
      }
      const torch::Tensor whole = torch::cat(pieces).narrow(0, 0, n);
      torch::Tensor padded = torch::zeros({live.padded[b]}, whole.options());
      padded.narrow(0, 0, n).copy_(whole);
      mine.fields[field] = padded.narrow(0, live.rank * live.piece[b], live.piece[b]).clone();
    }
    out.push_back(std::move(mine));
  }
  return out;
}

torch::Tensor reshard_flat_shard(const std::vector<torch::Tensor>& saved,
                                 const std::vector<ShardLayout>& layouts, const ShardLayout& live,
                                 const std::string& where) {
  PW_ASSERT(saved.size() == layouts.size() && !saved.empty(), "re-sharding: no saved shards");
  // Each bucket's piece as a one-field piece state: reshard_piece_states puts the pieces back
  // together and cuts this replica's.
  std::vector<std::vector<PieceState>> pieces(saved.size());
  for (std::size_t r = 0; r < saved.size(); ++r) {
    const ShardLayout& l = layouts[r];
    std::int64_t total = 0;
    for (std::int64_t q : l.piece) total += q;
    const torch::Tensor flat = saved[r].detach().flatten();
    PW_CHECK(flat.numel() == total, ConfigError,
             where << ": saved replica " << r << "'s parameter shard holds " << flat.numel()
                   << " elements, its layout " << total << " (checkpoint of another model?)");
    std::int64_t at = 0;
    for (std::int64_t q : l.piece) {
      PieceState p;
      p.present = true;
      p.fields["param"] = flat.narrow(0, at, q);
      pieces[r].push_back(std::move(p));
      at += q;
    }
  }
  const auto mine = reshard_piece_states(pieces, layouts, live, where);
  std::vector<torch::Tensor> parts;
  for (const auto& p : mine) parts.push_back(p.fields.at("param"));
  if (parts.empty()) return torch::empty({0}, saved.front().options());
  return torch::cat(parts);
}

}  // namespace pipewright::exec
