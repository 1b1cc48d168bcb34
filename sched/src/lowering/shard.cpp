// Where UNSHARD and RESHARD go (lower.hpp, Note [Where UNSHARD and RESHARD go]): a pure pass over
// a plan's rank lists.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lowering/slots.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/plan_dag.hpp"

namespace pipewright::sched {
namespace {

using lowering_detail::idx;
using lowering_detail::Ops;
using lowering_detail::Slot;
using lowering_detail::slots_of;

// A window over slots [first, last] of one stage; `fetch` is the slot before which its UNSHARD
// goes (first, or the slot before it: the all-gather overlaps that slot's compute).
struct Window {
  std::int32_t stage = 0;
  std::size_t first = 0;
  std::size_t last = 0;
  std::size_t fetch = 0;
  bool closed = false;  // kFit: merging it into its stage's previous window did not fit
};

// Whether window w's UNSHARD may go one slot early: not before the rank's first slot, nor where
// its stage is gathered already.
bool can_prefetch(const std::vector<Window>& windows, const Window& w) {
  if (w.first == 0) return false;
  return !std::any_of(windows.begin(), windows.end(), [&](const Window& o) {
    return &o != &w && o.stage == w.stage && o.first <= w.first - 1 && o.last >= w.first - 1;
  });
}

// Prefetch (kStep): each window's UNSHARD one slot early where it can be.
void set_fetch(std::vector<Window>& windows) {
  for (Window& w : windows) w.fetch = can_prefetch(windows, w) ? w.first - 1 : w.first;
}

// kStep: per stage one window from its first to its last slot.
std::vector<Window> step_windows(const std::vector<Slot>& slots) {
  std::vector<Window> out;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    for (std::int32_t s : slots[k].stages) {
      auto it = std::find_if(out.begin(), out.end(), [&](const Window& w) { return w.stage == s; });
      if (it == out.end()) {
        out.push_back({s, k, k, k});
      } else {
        it->last = k;
      }
    }
  }
  set_fetch(out);
  return out;
}

// kCompute: one window per slot and stage, no prefetch (the least memory).
std::vector<Window> compute_windows(const std::vector<Slot>& slots) {
  std::vector<Window> out;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    for (std::int32_t s : slots[k].stages) out.push_back({s, k, k, k});
  }
  return out;
}

// The rank's list with the windows' UNSHARD / RESHARD inserted: UNSHARDs right before their fetch
// slot's first action, RESHARDs right after their last slot's last action.
// Slots are in list order, so sorted by fetch (then first) the UNSHARDs come in list order, and
// sorted by last the RESHARDs do: both are merged into the list in one pass.
Ops emit(const Ops& ops, const std::vector<Slot>& slots, const std::vector<Window>& windows) {
  std::vector<Window> fetched = windows;
  std::stable_sort(fetched.begin(), fetched.end(), [](const Window& x, const Window& y) {
    return std::make_pair(x.fetch, x.first) < std::make_pair(y.fetch, y.first);
  });
  std::vector<Window> released = windows;
  std::stable_sort(released.begin(), released.end(),
                   [](const Window& x, const Window& y) { return x.last < y.last; });
  Ops out;
  out.reserve(ops.size() + 2 * windows.size());
  std::size_t u = 0, r = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (; u < fetched.size() && slots[fetched[u].fetch].begin == i; ++u)
      out.push_back(Action::stage_only(fetched[u].stage, ActionKind::kUnshard));
    out.push_back(ops[i]);
    for (; r < released.size() && slots[released[r].last].end - 1 == i; ++r)
      out.push_back(Action::stage_only(released[r].stage, ActionKind::kReshard));
  }
  return out;
}

// torch's _add_unshard_reshard (torch/distributed/pipelining/schedules.py) on one rank: before
// each slot, the first `lookahead` distinct stages of the slots from here on are the active set;
// stages leaving it are resharded (ascending), stages entering it unsharded (in order of use); at
// the end every active stage is resharded (ascending).
Ops torch_lookahead(const Ops& ops, const std::vector<Slot>& slots, int lookahead) {
  std::vector<std::vector<Action>> before(ops.size());
  std::vector<std::int32_t> active;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    std::vector<std::int32_t> next;
    for (std::size_t j = k; j < slots.size() && static_cast<int>(next.size()) < lookahead; ++j) {
      for (std::int32_t s : slots[j].stages) {
        if (std::find(next.begin(), next.end(), s) == next.end() &&
            static_cast<int>(next.size()) < lookahead) {
          next.push_back(s);
        }
      }
    }
    std::vector<std::int32_t> evict;
    for (std::int32_t s : active) {
      if (std::find(next.begin(), next.end(), s) == next.end()) evict.push_back(s);
    }
    std::sort(evict.begin(), evict.end());
    auto& here = before[slots[k].begin];
    for (std::int32_t s : evict) {
      here.push_back(Action::stage_only(s, ActionKind::kReshard));
      active.erase(std::find(active.begin(), active.end(), s));
    }
    for (std::int32_t s : next) {
      if (std::find(active.begin(), active.end(), s) != active.end()) continue;
      here.push_back(Action::stage_only(s, ActionKind::kUnshard));
      active.push_back(s);
    }
  }
  std::sort(active.begin(), active.end());
  // The final RESHARDs go right after the last slot (before the REDUCE_GRAD / OPTIM that follow).
  const std::size_t tail = slots.empty() ? ops.size() : slots.back().end;
  Ops out;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (i == tail) {
      for (std::int32_t s : active) out.push_back(Action::stage_only(s, ActionKind::kReshard));
    }
    out.insert(out.end(), before[i].begin(), before[i].end());
    out.push_back(ops[i]);
  }
  if (tail == ops.size()) {
    for (std::int32_t s : active) out.push_back(Action::stage_only(s, ActionKind::kReshard));
  }
  return out;
}

// The memory model of a plan with each (kind, stage)'s change computed once, for every rank.
class Changes {
 public:
  Changes(const PlanShape& shape, const CostTable& costs, const MemoryOptions& memory)
      : model_(shape, costs, memory) {}
  // What peak_memory adds to a rank's running peak: runtime, static and autocast cache bytes.
  [[nodiscard]] std::int64_t base(std::int32_t rank) const {
    return model_.runtime_bytes() + model_.static_bytes(rank) + model_.autocast_cache_bytes(rank);
  }
  const MemoryChange& change(ActionKind kind, std::int32_t stage) {
    const auto k = static_cast<std::size_t>(kind);
    const auto s = static_cast<std::size_t>(stage < 0 ? 0 : stage + 1);  // all stages < 0 alike
    if (s >= changes_.size()) changes_.resize(s + 1);
    auto& row = changes_[s];
    if (k >= row.size()) row.resize(k + 1);
    auto& slot = row[k];
    if (!slot) slot = model_.change(kind, stage);
    return *slot;
  }

 private:
  MemoryModel model_;
  std::vector<std::vector<std::optional<MemoryChange>>> changes_;  // [stage + 1][kind]
};

// One rank's peak_memory (memory.cpp's walk over the rank's list, the same sums in the same
// order).
class RankPeak {
 public:
  RankPeak(Changes& changes, std::int32_t rank) : changes_(changes), base_(changes.base(rank)) {}
  std::int64_t operator()(const Ops& list) {
    std::int64_t bytes = 0, peak = 0;
    for (const Action& a : list) {
      const MemoryChange& c = change(a.kind, a.stage);
      bytes += c.at_start;
      if (bytes > peak) peak = bytes;
      bytes += c.at_end;
    }
    return base_ + peak;
  }
  [[nodiscard]] std::int64_t base() const noexcept { return base_; }
  const MemoryChange& change(ActionKind kind, std::int32_t stage) {
    return changes_.change(kind, stage);
  }

 private:
  Changes& changes_;
  std::int64_t base_;
};

// Note [Incremental peak]'s conditions on a stage's UNSHARD / RESHARD: the bytes g >= 0 that they
// add and remove; nullopt when they do not hold.
std::optional<std::int64_t> gathered_bytes(RankPeak& rank_peak, std::int32_t stage) {
  const MemoryChange& u = rank_peak.change(ActionKind::kUnshard, stage);
  const MemoryChange& r = rank_peak.change(ActionKind::kReshard, stage);
  if (u.at_start < 0 || u.at_end != 0 || r.at_start != 0 || r.at_end != -u.at_start)
    return std::nullopt;
  return u.at_start;
}

// The base list's check points (running bytes before action i plus its at_start); nullopt when
// a change does not keep Note [Incremental peak]'s signs.
std::optional<std::vector<std::int64_t>> check_points(const Ops& ops, RankPeak& rank_peak) {
  std::vector<std::int64_t> points(ops.size());
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const MemoryChange& c = rank_peak.change(ops[i].kind, ops[i].stage);
    if (c.at_start < 0 || c.at_end > 0) return std::nullopt;
    points[i] = bytes + c.at_start;
    bytes += c.at_start + c.at_end;
  }
  return points;
}

// Range add and the maximum over all: a segment tree whose node holds the maximum of its range
// less the adds of its ancestors (no push-down: an add stops at the nodes it covers).
class MaxTree {
 public:
  explicit MaxTree(const std::vector<std::int64_t>& values) : n_(values.size()) {
    std::size_t size = 1;
    while (size < n_) size *= 2;
    max_.assign(2 * size, kNone);
    add_.assign(2 * size, 0);
    size_ = size;
    for (std::size_t i = 0; i < n_; ++i) max_[size + i] = values[i];
    for (std::size_t v = size; v-- > 1;) max_[v] = std::max(max_[2 * v], max_[2 * v + 1]);
  }
  // Adds delta to the values [lo, hi).
  void add(std::size_t lo, std::size_t hi, std::int64_t delta) {
    if (lo < hi) add(1, 0, size_, lo, hi, delta);
  }
  [[nodiscard]] std::int64_t max() const noexcept { return max_[1]; }

 private:
  static constexpr std::int64_t kNone = INT64_MIN / 4;  // padding: below any sum of bytes
  void add(std::size_t v, std::size_t l, std::size_t r, std::size_t lo, std::size_t hi,
           std::int64_t delta) {
    if (hi <= l || r <= lo) return;
    if (lo <= l && r <= hi) {
      add_[v] += delta;
      max_[v] += delta;
      return;
    }
    const std::size_t mid = (l + r) / 2;
    add(2 * v, l, mid, lo, hi, delta);
    add(2 * v + 1, mid, r, lo, hi, delta);
    max_[v] = std::max(max_[2 * v], max_[2 * v + 1]) + add_[v];
  }
  std::size_t n_ = 0, size_ = 1;
  std::vector<std::int64_t> max_, add_;
};

// Note [Incremental peak]: kFit's greedy asks "does the rank's peak fit?" after each trial
// (a merge, a prefetch); walking the rank's list for each made a ZeRO-3 search spend nearly all
// its time here. When every compute action's change holds at_start >= 0 and at_end <= 0 and
// UNSHARD / RESHARD of a stage add and remove the same g >= 0 bytes (what memory.cpp's model
// gives), an UNSHARD's check point is never above the action it precedes and a RESHARD's never
// above the one it follows. The peak is then the largest of the base list's check points (the
// list without shard actions: running bytes before action i plus its at_start), each raised by
// the g of the windows open at it (UNSHARD at or before i, RESHARD after it). A window adds g over
// a range of actions, a merge over the gap between its two windows, a prefetch over the slot
// before it: a segment tree (range add, maximum over all) answers each trial in O(log n). The
// greedy's order is kept: the open merges in order of (gap, the earlier window's position), the
// first that fits taken, one that does not closed (Note [Where UNSHARD and RESHARD go]); a merge
// moves the next gap of the absorbed window under the earlier window's position. When the
// conditions do not hold, fit_rank re-walks the list for each trial (ShardFit::rewalk).
//
// The incremental greedy on one rank, from kCompute's windows (which fit); nullopt when the
// conditions above do not hold.
std::optional<std::vector<Window>> fit_incremental(const Ops& ops, const std::vector<Slot>& slots,
                                                   const ShardFit& fit, RankPeak& rank_peak) {
  const auto points = check_points(ops, rank_peak);
  if (!points) return std::nullopt;
  std::vector<Window> original = compute_windows(slots);
  const std::size_t n = original.size();
  std::vector<std::int64_t> g(n);
  for (std::size_t w = 0; w < n; ++w) {
    const auto b = gathered_bytes(rank_peak, original[w].stage);
    if (!b) return std::nullopt;
    g[w] = *b;
  }
  MaxTree tree(*points);
  const auto fits = [&] {
    return rank_peak.base() + std::max<std::int64_t>(0, tree.max()) <= fit.limit_bytes;
  };
  for (std::size_t w = 0; w < n; ++w) {
    const Slot& s = slots[original[w].first];
    tree.add(s.begin, s.end, g[w]);
  }
  // Per window: the next window of its stage (n: none); per chain of merged windows, keyed by its
  // head (the first window): its tail (the last).
  std::vector<std::size_t> next(n, n), tail(n), head(n);
  {
    std::vector<std::size_t> following;
    for (std::size_t w = n; w-- > 0;) {
      const auto s = idx(original[w].stage);
      if (s >= following.size()) following.resize(s + 1, n);
      next[w] = following[s];
      following[s] = w;
      tail[w] = head[w] = w;
    }
  }
  // Open merges: (gap in slots, head of the earlier window's chain, that chain's tail).
  using Merge = std::tuple<std::size_t, std::size_t, std::size_t>;
  std::set<Merge> open;
  const auto gap_of = [&](std::size_t a) { return original[next[a]].first - original[a].first; };
  for (std::size_t a = 0; a < n; ++a) {
    if (next[a] != n) open.emplace(gap_of(a), a, a);
  }
  while (!open.empty()) {
    const auto [gap, h, a] = *open.begin();
    open.erase(open.begin());
    const std::size_t b = next[a];
    const std::size_t lo = slots[original[a].first].end, hi = slots[original[b].first].begin;
    tree.add(lo, hi, g[a]);
    if (!fits()) {
      tree.add(lo, hi, -g[a]);  // closed: never tried again
      continue;
    }
    // b's chain joins h's; the merge after it (if open) now follows h's window.
    const std::size_t t = tail[b];
    tail[h] = t;
    head[b] = h;
    if (next[t] != n && open.erase(Merge{gap_of(t), b, t}) == 1) open.emplace(gap_of(t), h, t);
  }
  std::vector<Window> windows;
  for (std::size_t w = 0; w < n; ++w) {
    if (head[w] != w) continue;
    Window x = original[w];
    x.last = original[tail[w]].first;
    windows.push_back(x);
  }
  // Prefetch in window order (can_prefetch: the stage's previous window does not end right
  // before this one; windows of a stage are disjoint and ordered).
  std::vector<std::size_t> last_of;  // per stage: the last slot of its latest window + 1 (0: none)
  for (Window& w : windows) {
    const auto s = idx(w.stage);
    if (s >= last_of.size()) last_of.resize(s + 1, 0);
    const bool can = w.first != 0 && last_of[s] != w.first;  // last + 1 == first: gathered there
    last_of[s] = w.last + 1;
    if (!can) continue;
    const std::size_t lo = slots[w.first - 1].begin, hi = slots[w.first].begin;
    const std::int64_t add = *gathered_bytes(rank_peak, w.stage);
    tree.add(lo, hi, add);
    if (fits()) {
      w.fetch = w.first - 1;
    } else {
      tree.add(lo, hi, -add);
    }
  }
  return windows;
}

// kFit on one rank: the step windows if they fit; else from one window per slot, merge the
// consecutive windows of a stage with the shortest gaps first while the rank's peak fits.
template <typename Plan>
Ops fit_rank(Plan& plan, std::int32_t rank, const Ops& ops, const std::vector<Slot>& slots,
             const ShardFit& fit, Changes& changes) {
  auto& list = plan.per_rank[idx(rank)];
  RankPeak rank_peak(changes, rank);
  list = emit(ops, slots, step_windows(slots));
  if (rank_peak(list) <= fit.limit_bytes) return list;
  std::vector<Window> windows = compute_windows(slots);
  // Gathering around each compute action alone holds the least: when even that is over the
  // limit, no merge or prefetch below can fit, and the placement is these windows.
  list = emit(ops, slots, windows);
  if (!fit.plain && rank_peak(list) > fit.limit_bytes) return list;
  if (!fit.plain && !fit.rewalk) {  // Note [Incremental peak]
    if (auto placed = fit_incremental(ops, slots, fit, rank_peak)) {
      list = emit(ops, slots, *placed);
      return list;
    }
  }
  // Merge candidates: (gap in slots, stage, first slot of the earlier window). Merging only
  // holds more (the list loses a RESHARD and an UNSHARD, and every check point between them holds
  // the stage's parameters too), so a merge that did not fit never fits after other merges: it
  // is closed, not tried again (each gap is tried once until it fits or is closed).
  bool merged = true;
  while (merged) {
    merged = false;
    // (gap, index of the earlier window). The windows stay ordered by their first slot and a
    // stage's windows are disjoint, so a window's successor (its stage's window with the least
    // first slot after it) is the next window of its stage in the list: one pass from the back.
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    std::vector<std::size_t> following;  // per stage: the index of its nearest later window
    std::vector<std::size_t> successor(windows.size(), windows.size());
    for (std::size_t i = windows.size(); i-- > 0;) {
      const auto s = idx(windows[i].stage);
      if (s >= following.size()) following.resize(s + 1, windows.size());
      successor[i] = following[s];
      following[s] = i;
    }
    for (std::size_t i = 0; i < windows.size(); ++i) {
      const std::size_t best = successor[i];
      if (best != windows.size() && !windows[best].closed)
        pairs.emplace_back(windows[best].first - windows[i].last, i);
    }
    std::stable_sort(pairs.begin(), pairs.end());
    for (const auto& [gap, i] : pairs) {
      std::vector<Window> trial = windows;
      const std::size_t next = successor[i];
      trial[i].last = trial[next].last;
      trial.erase(trial.begin() + static_cast<std::ptrdiff_t>(next));
      list = emit(ops, slots, trial);
      if (rank_peak(list) <= fit.limit_bytes) {
        windows = std::move(trial);
        merged = true;
        break;
      }
      windows[next].closed = !fit.plain;
    }
  }
  // Then prefetch (UNSHARD one slot early, overlapping the all-gather) where it still fits.
  for (Window& w : windows) {
    if (!can_prefetch(windows, w)) continue;
    w.fetch = w.first - 1;
    list = emit(ops, slots, windows);
    if (rank_peak(list) > fit.limit_bytes) w.fetch = w.first;
  }
  list = emit(ops, slots, windows);
  return list;
}

template <typename Plan>
Plan place(Plan plan, ShardPlacement placement, const ShardFit* fit, int lookahead) {
  PW_CHECK(lookahead >= 1, ConfigError, "UNSHARD look-ahead must be >= 1, got " << lookahead);
  std::optional<Changes> changes;  // kFit's memory model, built for the first rank that needs it
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    Ops ops;
    for (const Action& a : plan.per_rank[r]) {
      if (!is_shard(a.kind)) ops.push_back(a);
    }
    const std::vector<Slot> slots = slots_of(ops);
    switch (placement) {
      case ShardPlacement::kStep:
        plan.per_rank[r] = emit(ops, slots, step_windows(slots));
        break;
      case ShardPlacement::kCompute:
        plan.per_rank[r] = emit(ops, slots, compute_windows(slots));
        break;
      case ShardPlacement::kTorch:
        plan.per_rank[r] = torch_lookahead(ops, slots, lookahead);
        break;
      case ShardPlacement::kFit:
        if (fit == nullptr || fit->costs == nullptr || fit->limit_bytes <= 0) {
          plan.per_rank[r] = emit(ops, slots, step_windows(slots));
        } else {
          if (!changes) changes.emplace(plan.shape, *fit->costs, fit->memory);
          plan.per_rank[r] =
              fit_rank(plan, static_cast<std::int32_t>(r), ops, slots, *fit, *changes);
        }
        break;
    }
  }
  return plan;
}

}  // namespace

ShardPlacement parse_shard_placement(std::string_view name) {
  if (name == "fit") return ShardPlacement::kFit;
  if (name == "step") return ShardPlacement::kStep;
  if (name == "compute") return ShardPlacement::kCompute;
  if (name == "torch") return ShardPlacement::kTorch;
  throw ConfigError("--shard-placement: '" + std::string(name) +
                    "' is not fit, step, compute or torch");
}

std::string_view to_string(ShardPlacement placement) noexcept {
  switch (placement) {
    case ShardPlacement::kFit:
      return "fit";
    case ShardPlacement::kStep:
      return "step";
    case ShardPlacement::kCompute:
      return "compute";
    case ShardPlacement::kTorch:
      return "torch";
  }
  return "?";
}

bool has_shard_actions(const std::vector<std::vector<Action>>& per_rank) noexcept {
  for (const auto& ops : per_rank) {
    for (const Action& a : ops) {
      if (is_shard(a.kind)) return true;
    }
  }
  return false;
}

LoweredPlan place_shards(LoweredPlan plan, ShardPlacement placement, const ShardFit* fit,
                         int lookahead) {
  return place(std::move(plan), placement, fit, lookahead);
}

ComputePlan place_shards(ComputePlan plan, ShardPlacement placement, const ShardFit* fit,
                         int lookahead) {
  return place(std::move(plan), placement, fit, lookahead);
}

}  // namespace pipewright::sched
