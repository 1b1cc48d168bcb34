#include "pipewright/sched/schedule.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "schedules/schedule_detail.hpp"

namespace pipewright::sched {
namespace {

using Ops = std::vector<Action>;

Action fwd(std::int32_t stage, std::int32_t mb) {
  return Action::compute(stage, ActionKind::kForward, mb);
}

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Longest path (in edges) from each stage to a sink of the DAG: how many hops a gradient needs
// to come back. For the chain this is stages - 1 - s, torch's 1F1B warm-up count.
std::vector<std::int32_t> hops_to_sink(const PlanShape& shape) {
  std::vector<std::int32_t> depth(static_cast<std::size_t>(shape.stages), -1);
  std::vector<std::vector<std::int32_t>> consumers(static_cast<std::size_t>(shape.stages));
  for (const auto& e : shape.edges()) consumers[static_cast<std::size_t>(e.from)].push_back(e.to);
  // The DAG was checked acyclic; memoised DFS.
  std::function<std::int32_t(std::int32_t)> visit = [&](std::int32_t s) -> std::int32_t {
    auto& d = depth[static_cast<std::size_t>(s)];
    if (d >= 0) return d;
    std::int32_t best = 0;
    for (std::int32_t c : consumers[static_cast<std::size_t>(s)])
      best = std::max(best, visit(c) + 1);
    d = best;
    return d;
  };
  for (std::int32_t s = 0; s < shape.stages; ++s) visit(s);
  return depth;
}

// Note [GPipe order]: torch's ScheduleGPipe runs all forwards in microbatch order, then all
// backwards in microbatch order (not reversed), on the rank's only stage.
Ops gpipe_rank(std::int32_t stage, std::int32_t m) {
  Ops ops;
  ops.reserve(static_cast<std::size_t>(2 * m));
  for (std::int32_t i = 0; i < m; ++i) ops.push_back(fwd(stage, i));
  for (std::int32_t i = 0; i < m; ++i) {
    ops.push_back(Action::compute(stage, ActionKind::kFullBackward, i));
  }
  return ops;
}

// Note [1F1B order]: torch's Schedule1F1B._get_pipeline_order: `warmup` forwards (p - r - 1 on
// the chain), then pairs (F, B) while forwards remain, then the remaining backwards. The runtime
// (`_step_microbatches`, min(m, p - r) forwards before the first backward) executes the same order.
Ops one_f_one_b_rank(std::int32_t stage, std::int32_t warmup, std::int32_t m) {
  Ops ops;
  ops.reserve(static_cast<std::size_t>(2 * m));
  std::int32_t f = 0;
  std::int32_t b = 0;
  for (; f < warmup; ++f) ops.push_back(fwd(stage, f));
  while (f < m) {
    ops.push_back(fwd(stage, f++));
    ops.push_back(Action::compute(stage, ActionKind::kFullBackward, b++));
  }
  while (b < m) ops.push_back(Action::compute(stage, ActionKind::kFullBackward, b++));
  return ops;
}

// torch's ScheduleLoopedBFS._calculate_single_rank_operations: forwards of every local stage in
// ascending stage order, then backwards of every local stage in descending stage order with the
// microbatches reversed.
Ops looped_bfs_rank(std::int32_t rank, std::int32_t p, std::int32_t v, std::int32_t m) {
  Ops ops;
  ops.reserve(static_cast<std::size_t>(2 * v * m));
  for (std::int32_t l = 0; l < v; ++l) {
    for (std::int32_t i = 0; i < m; ++i) ops.push_back(fwd(l * p + rank, i));
  }
  for (std::int32_t l = v - 1; l >= 0; --l) {
    for (std::int32_t i = m - 1; i >= 0; --i) {
      ops.push_back(Action::compute(l * p + rank, ActionKind::kFullBackward, i));
    }
  }
  return ops;
}

// Note [Interleaved warm-up]: torch's interleaved schedules (Interleaved1F1B,
// InterleavedZeroBubble) share `_get_warmup_ops` and `_get_1f1b_rank_ops`:
//   rounds = max(1, m // p), microbatches_per_round = m // rounds (m % rounds must be 0);
//   warmup = min((v - 1) * mpr + factor * (p - 1 - r), v * m), factor 2 (1F1B) or 1 (ZB);
//   op k in [0, v*m) forwards local stage (k // mpr) % v, op k >= warmup backwards local stage
//   v - 1 - ((k - warmup) // mpr) % v; each stage's microbatches are taken in order.
// Zero bubble: the backward is I (input gradient); once op - warmup >= r, every 1F1B / cool-down
// step is followed by the W of the oldest backward still without one; the remaining W follow at
// the end, oldest first.
struct InterleavedShape {
  std::int32_t p;
  std::int32_t v;
  std::int32_t m;
  std::int32_t mpr;  // microbatches per round
  bool zero_bubble;
};

Ops interleaved_rank(const InterleavedShape& s, std::int32_t rank) {
  const std::int32_t factor = s.zero_bubble ? 1 : 2;
  const std::int32_t total = s.v * s.m;
  const std::int32_t warmup = std::min((s.v - 1) * s.mpr + factor * (s.p - 1 - rank), total);
  const std::int32_t fwd_bwd = total - warmup;
  const std::int32_t cooldown = total - fwd_bwd;
  auto fwd_stage = [&](std::int32_t op) { return ((op / s.mpr) % s.v) * s.p + rank; };
  auto bwd_stage = [&](std::int32_t op) {
    return (s.v - 1 - ((op - warmup) / s.mpr) % s.v) * s.p + rank;
  };
  // Per-local-stage counters, indexed by stage / p.
  std::vector<std::int32_t> next_f(static_cast<std::size_t>(s.v), 0);
  std::vector<std::int32_t> next_b(static_cast<std::size_t>(s.v), 0);
  std::vector<std::int32_t> next_w(static_cast<std::size_t>(s.v), 0);
  auto take = [&](std::vector<std::int32_t>& counter, std::int32_t stage) {
    return counter[static_cast<std::size_t>(stage / s.p)]++;
  };
  const ActionKind backward_kind =
      s.zero_bubble ? ActionKind::kBackwardInput : ActionKind::kFullBackward;
  std::vector<std::int32_t> backward_ops;  // op ids of the backwards, for W placement
  backward_ops.reserve(static_cast<std::size_t>(total));
  std::size_t weights_done = 0;
  Ops ops;
  ops.reserve(static_cast<std::size_t>(total * (s.zero_bubble ? 3 : 2)));
  auto push_weight = [&]() {
    const std::int32_t st = bwd_stage(backward_ops[weights_done++]);
    ops.push_back(Action::compute(st, ActionKind::kBackwardWeight, take(next_w, st)));
  };
  for (std::int32_t op = 0; op < warmup + fwd_bwd + cooldown; ++op) {
    if (op < warmup) {
      const std::int32_t st = fwd_stage(op);
      ops.push_back(fwd(st, take(next_f, st)));
      continue;
    }
    if (op < warmup + fwd_bwd) {
      const std::int32_t st = fwd_stage(op);
      ops.push_back(fwd(st, take(next_f, st)));
    }
    const std::int32_t bst = bwd_stage(op);
    ops.push_back(Action::compute(bst, backward_kind, take(next_b, bst)));
    backward_ops.push_back(op);
    if (s.zero_bubble && op - warmup >= rank) push_weight();
  }
  while (s.zero_bubble && weights_done < backward_ops.size()) push_weight();
  return ops;
}

void check_positive(const ScheduleSpec& spec) {
  PW_CHECK(spec.ranks >= 1, ConfigError, "--pp must be >= 1, got " << spec.ranks);
  PW_CHECK(spec.microbatches >= 1, ConfigError,
           "--microbatches must be >= 1, got " << spec.microbatches);
  PW_CHECK(spec.stages_per_rank >= 1, ConfigError,
           "--stages-per-rank must be >= 1, got " << spec.stages_per_rank);
  // Keep v * m and the action counts inside int32 with room to spare.
  const std::int64_t actions = std::int64_t{spec.ranks} * spec.stages_per_rank * spec.microbatches;
  PW_CHECK(
      actions <= (std::int64_t{1} << 28), ConfigError,
      "plan too large: ranks * stages-per-rank * microbatches = " << actions << " (limit 2^28)");
}

bool is_chain(const std::vector<StageEdge>& edges, std::int32_t stages) {
  if (edges.empty()) return true;
  if (static_cast<std::int32_t>(edges.size()) != stages - 1) return false;
  std::set<std::pair<std::int32_t, std::int32_t>> set;
  for (const auto& e : edges) set.insert({e.from, e.to});
  for (std::int32_t s = 0; s + 1 < stages; ++s) {
    if (set.count({s, s + 1}) == 0) return false;
  }
  return true;
}

}  // namespace

namespace {

// ZBVZeroBubble, DualPipeV, Chimera: V placement over 2p plan stages (schedule.hpp).
ComputePlan generate_v(const ScheduleSpec& spec) {
  const std::int32_t p = spec.ranks;
  const std::int32_t m = spec.microbatches;
  const std::int32_t v = spec.stages_per_rank;
  const bool chimera = spec.kind == ScheduleKind::kChimera;
  const std::string name(to_string(spec.kind));
  if (chimera) {
    PW_CHECK(p % 2 == 0, ConfigError,
             "Chimera needs an even number of ranks (its two pipelines in opposite directions "
             "pair rank r with rank P-1-r), got --pp "
                 << p);
    PW_CHECK(v == 1, ConfigError,
             "Chimera: --stages-per-rank must be 1 (the model has P stages; each rank holds one "
             "stage of the down and one of the up pipeline), got "
                 << v);
    PW_CHECK(spec.stage_edges.empty() || is_chain(spec.stage_edges, p), ConfigError,
             "Chimera runs a chain of stages; a stage DAG is not supported");
  } else {
    // torch: "ZBV requires exactly 2 stages per rank, but got {n}." (both V schedules)
    PW_CHECK(v == 2, ConfigError,
             name << ": ZBV requires exactly 2 stages per rank, but got " << v
                  << " (V placement: rank r holds stages r and 2P-1-r; pass --stages-per-rank 2)");
    PW_CHECK(spec.stage_edges.empty() || is_chain(spec.stage_edges, 2 * p), ConfigError,
             name << " runs a chain of stages (V placement); a stage DAG is not supported");
  }
  if (spec.kind == ScheduleKind::kDualPipeV) {
    PW_CHECK(m >= 2 * p, ConfigError,
             "DualPipeV requires at least as many microbatches as stages, but got "
                 << m << " microbatches and " << 2 * p << " stages (torch's ScheduleDualPipeV)");
  }
  ComputePlan plan;
  plan.shape.ranks = p;
  plan.shape.stages = 2 * p;
  plan.shape.microbatches = m;
  plan.shape.schedule = name;
  plan.shape.stage_to_rank = v_placement(p);
  plan.per_rank.resize(static_cast<std::size_t>(p));
  if (chimera) {
    plan.shape.stage_to_model_stage.resize(static_cast<std::size_t>(2 * p));
    for (std::int32_t s = 0; s < 2 * p; ++s) {
      plan.shape.stage_to_model_stage[static_cast<std::size_t>(s)] = s < p ? s : s - p;
      if (s + 1 < 2 * p && s + 1 != p) plan.shape.stage_edges.push_back({s, s + 1});
    }
    // P = 2 down chain 0 -> 1, up chain 2 -> 3; an explicit list even when it looks like a chain.
    plan.per_rank = detail::chimera(p, m);
  } else {
    for (std::int32_t r = 0; r < p; ++r) {
      plan.per_rank[static_cast<std::size_t>(r)] = spec.kind == ScheduleKind::kZBVZeroBubble
                                                       ? detail::zbv_rank(p, m, r)
                                                       : detail::dualpipev_rank(p, m, r);
    }
  }
  if (spec.forward_only) {
    plan.shape.forward_only = true;
    for (auto& ops : plan.per_rank) ops = detail::forward_only(ops);
  }
  return plan;
}

struct KindEntry {
  ScheduleKind kind;
  std::string_view name;
};
constexpr KindEntry kKinds[] = {
    {ScheduleKind::kGPipe, "GPipe"},
    {ScheduleKind::k1F1B, "1F1B"},
    {ScheduleKind::kInterleaved1F1B, "Interleaved1F1B"},
    {ScheduleKind::kLoopedBFS, "LoopedBFS"},
    {ScheduleKind::kInterleavedZeroBubble, "InterleavedZeroBubble"},
    {ScheduleKind::kZBVZeroBubble, "ZBVZeroBubble"},
    {ScheduleKind::kDualPipeV, "DualPipeV"},
    {ScheduleKind::kChimera, "Chimera"},
    {ScheduleKind::kZBH2, "ZBH2"},
};
}  // namespace

bool is_v_shaped(ScheduleKind kind) noexcept {
  return kind == ScheduleKind::kZBVZeroBubble || kind == ScheduleKind::kDualPipeV ||
         kind == ScheduleKind::kChimera;
}

int required_stages_per_rank(ScheduleKind kind) noexcept {
  switch (kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::k1F1B:
    case ScheduleKind::kChimera:
    case ScheduleKind::kZBH2:
      return 1;
    case ScheduleKind::kZBVZeroBubble:
    case ScheduleKind::kDualPipeV:
      return 2;
    default:
      return 0;
  }
}

std::string_view to_string(ScheduleKind kind) noexcept {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "?";
}

const std::vector<ScheduleKind>& all_schedule_kinds() {
  static const std::vector<ScheduleKind> kinds = [] {
    std::vector<ScheduleKind> out;
    for (const auto& k : kKinds) out.push_back(k.kind);
    return out;
  }();
  return kinds;
}

std::string schedule_kind_names() {
  std::string out;
  for (const auto& k : kKinds) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  const std::string wanted = lower_ascii(name);
  for (const auto& k : kKinds) {
    if (lower_ascii(k.name) == wanted) return k.kind;
  }
  throw ConfigError("unknown schedule '" + std::string(name) +
                    "'; valid schedules: " + schedule_kind_names());
}

void check_stage_edges(const std::vector<StageEdge>& edges, std::int32_t stages) {
  std::set<std::pair<std::int32_t, std::int32_t>> seen;
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(stages));
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const auto& e = edges[i];
    PW_CHECK(e.from >= 0 && e.from < stages && e.to >= 0 && e.to < stages, ConfigError,
             "stage edge " << i << " (" << e.from << " -> " << e.to << ") is out of range [0, "
                           << stages << ")");
    PW_CHECK(e.from != e.to, ConfigError,
             "stage edge " << i << " is a self loop on stage " << e.from);
    PW_CHECK(seen.insert({e.from, e.to}).second, ConfigError,
             "stage edge " << i << " (" << e.from << " -> " << e.to << ") is duplicated");
    out[static_cast<std::size_t>(e.from)].push_back(e.to);
  }
  // Iterative three-colour DFS; on a back edge, report the cycle's stages.
  std::vector<int> colour(static_cast<std::size_t>(stages), 0);
  std::vector<std::int32_t> parent(static_cast<std::size_t>(stages), -1);
  for (std::int32_t root = 0; root < stages; ++root) {
    if (colour[static_cast<std::size_t>(root)] != 0) continue;
    std::vector<std::pair<std::int32_t, std::size_t>> stack{{root, 0}};
    colour[static_cast<std::size_t>(root)] = 1;
    while (!stack.empty()) {
      auto& [s, next] = stack.back();
      const auto& succ = out[static_cast<std::size_t>(s)];
      if (next == succ.size()) {
        colour[static_cast<std::size_t>(s)] = 2;
        stack.pop_back();
        continue;
      }
      const std::int32_t t = succ[next++];
      if (colour[static_cast<std::size_t>(t)] == 1) {
        std::string cycle = std::to_string(t);
        for (std::int32_t u = s; u != t && u >= 0; u = parent[static_cast<std::size_t>(u)]) {
          cycle = std::to_string(u) + " -> " + cycle;
        }
        cycle = std::to_string(t) + " -> " + cycle;
        throw ConfigError("stage edges contain a cycle: " + cycle);
      }
      if (colour[static_cast<std::size_t>(t)] == 0) {
        colour[static_cast<std::size_t>(t)] = 1;
        parent[static_cast<std::size_t>(t)] = s;
        stack.emplace_back(t, 0);
      }
    }
  }
}

ComputePlan generate(const ScheduleSpec& spec) {
  check_positive(spec);
  const std::int32_t p = spec.ranks;
  const std::int32_t m = spec.microbatches;
  const std::int32_t v = spec.stages_per_rank;
  const std::string_view name = to_string(spec.kind);

  if (is_v_shaped(spec.kind)) return generate_v(spec);

  ComputePlan plan;
  plan.shape.ranks = p;
  plan.shape.stages = p * v;
  plan.shape.microbatches = m;
  plan.shape.schedule = std::string(name);
  plan.shape.stage_to_rank = looping_placement(p, p * v);
  check_stage_edges(spec.stage_edges, p * v);
  if (!is_chain(spec.stage_edges, p * v)) plan.shape.stage_edges = spec.stage_edges;
  plan.per_rank.resize(static_cast<std::size_t>(p));

  const bool single_stage = spec.kind == ScheduleKind::kGPipe || spec.kind == ScheduleKind::k1F1B ||
                            spec.kind == ScheduleKind::kZBH2;
  if (single_stage) {
    PW_CHECK(v == 1, ConfigError,
             name << " is a single-stage schedule (torch's PipelineScheduleSingle): "
                     "--stages-per-rank must be 1, got "
                  << v << "; use Interleaved1F1B, LoopedBFS or InterleavedZeroBubble");
  } else {
    // Note [Looped schedules over a stage DAG]: torch's looped orders are written for the chain
    // 0 -> 1 -> ... -> S-1. A DAG whose edges all go from a lower to a higher stage (a chain plus
    // skip connections, as a partition of a model with skips is numbered) keeps every dependency
    // of the chain order: a forward of stage t follows the forwards of every lower stage of its
    // microbatch, a backward of stage s every higher one. make_plan dry-runs the result for
    // deadlocks either way.
    for (const auto& e : spec.stage_edges) {
      PW_CHECK(e.from < e.to, ConfigError,
               name << " needs stage edges from a lower to a higher stage (torch's looped "
                       "schedules run stage s before stage s + 1), got "
                    << e.from << " -> " << e.to << "; use GPipe or 1F1B for this stage DAG");
    }
  }

  // ZB-H2's unit-time order (Note [ZB-H2 order]) follows the chain's dependencies only.
  PW_CHECK(spec.kind != ScheduleKind::kZBH2 || is_chain(spec.stage_edges, p), ConfigError,
           "ZBH2 runs a chain of stages (its order is drawn for 0 -> 1 -> ... -> P-1); a stage "
           "DAG is not supported, use GPipe or 1F1B");
  if (spec.forward_only && single_stage) {
    // torch's _ScheduleForwardOnly / DeepSpeed's InferenceSchedule: every microbatch in order.
    plan.shape.forward_only = true;
    for (std::int32_t r = 0; r < p; ++r) {
      auto& ops = plan.per_rank[static_cast<std::size_t>(r)];
      for (std::int32_t i = 0; i < m; ++i) ops.push_back(fwd(r, i));
    }
    return plan;
  }
  switch (spec.kind) {
    case ScheduleKind::kZBVZeroBubble:
    case ScheduleKind::kDualPipeV:
    case ScheduleKind::kChimera:
      break;  // generate_v
    case ScheduleKind::kGPipe:
      for (std::int32_t r = 0; r < p; ++r)
        plan.per_rank[static_cast<std::size_t>(r)] = gpipe_rank(r, m);
      break;
    case ScheduleKind::k1F1B: {
      // torch: Schedule1F1B.__init__ raises ValueError for n_microbatches < num_stages.
      PW_CHECK(m >= p, ConfigError,
               "1F1B: Number of microbatches (" << m
                                                << ") must be greater than or equal to the number "
                                                   "of stages ("
                                                << p << ") (torch's Schedule1F1B rejects it)");
      const auto hops = hops_to_sink(plan.shape);
      for (std::int32_t r = 0; r < p; ++r) {
        const std::int32_t warmup = std::min(m, hops[static_cast<std::size_t>(r)]);
        plan.per_rank[static_cast<std::size_t>(r)] = one_f_one_b_rank(r, warmup, m);
      }
      break;
    }
    case ScheduleKind::kZBH2:
      plan.per_rank = detail::zb_h2(p, m);
      break;
    case ScheduleKind::kLoopedBFS:
      for (std::int32_t r = 0; r < p; ++r) {
        plan.per_rank[static_cast<std::size_t>(r)] = looped_bfs_rank(r, p, v, m);
      }
      break;
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kInterleavedZeroBubble: {
      const bool zb = spec.kind == ScheduleKind::kInterleavedZeroBubble;
      const std::int32_t rounds = std::max(1, m / p);
      PW_CHECK(m % rounds == 0, ConfigError,
               name << ": " << (zb ? "Zero bubble" : "Interleaved 1F1B")
                    << " requires the number of microbatches to be a multiple of the number of "
                       "rounds ("
                    << rounds << "), but got " << m << " (rounds = max(1, microbatches / ranks))");
      const InterleavedShape shape{p, v, m, m / rounds, zb};
      for (std::int32_t r = 0; r < p; ++r) {
        plan.per_rank[static_cast<std::size_t>(r)] = interleaved_rank(shape, r);
      }
      break;
    }
  }
  if (spec.forward_only) {
    plan.shape.forward_only = true;
    for (auto& ops : plan.per_rank) ops = detail::forward_only(ops);
  }
  return plan;
}

}  // namespace pipewright::sched
