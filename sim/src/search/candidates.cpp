// What a search candidate is, in words and in bytes: the data-parallel variants tried, the text of
// a candidate, the closed-form memory bound (Note [Search pruning]), and ranking a search's
// fitting candidates with their Pareto front (rank_candidates, search/rank.hpp).
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <set>
#include <string>
#include <tuple>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/training.hpp"
#include "pipewright/sim/search.hpp"
#include "search/rank.hpp"

namespace pipewright::sim {

std::vector<DpVariant> default_dp_variants() { return {DpVariant{DpAlgorithm::kDdp, 25.0, 1, 1}}; }

std::vector<DpVariant> dp_variants_for(const std::vector<DpAlgorithm>& algorithms) {
  std::vector<DpVariant> out;
  for (auto a : algorithms) {
    switch (a) {
      case DpAlgorithm::kDdp:
        out.push_back(DpVariant{DpAlgorithm::kDdp, 25.0, 1, 1});
        break;
      case DpAlgorithm::kLocalSgd:
        out.push_back(DpVariant{DpAlgorithm::kLocalSgd, 25.0, 2, 1});
        break;
      case DpAlgorithm::kSlowMo:
        out.push_back(DpVariant{DpAlgorithm::kSlowMo, 25.0, 2, 4});
        break;
      case DpAlgorithm::kDiLoCo:
        out.push_back(DpVariant{DpAlgorithm::kDiLoCo, 25.0, 1, 1, 8, 1});
        out.push_back(DpVariant{DpAlgorithm::kDiLoCo, 25.0, 1, 1, 8, 2});
        break;
      case DpAlgorithm::kSgp:
        out.push_back(DpVariant{DpAlgorithm::kSgp, 25.0, 1, 1});
        break;
    }
  }
  return out;
}

std::string describe(const DpVariant& d) {
  char dp[64];
  switch (d.algorithm) {
    case DpAlgorithm::kDdp:
      std::snprintf(dp, sizeof dp, "ddp(%gMiB)", d.bucket_cap_mb);
      break;
    case DpAlgorithm::kLocalSgd:
      std::snprintf(dp, sizeof dp, "localsgd(every %d)", d.localsgd_frequency);
      break;
    case DpAlgorithm::kSlowMo:
      std::snprintf(dp, sizeof dp, "slowmo(avg %d, slow %d)", d.localsgd_frequency,
                    d.slowmo_frequency);
      break;
    case DpAlgorithm::kDiLoCo:
      if (d.fragments > 1) {
        std::snprintf(dp, sizeof dp, "streaming-diloco(every %d, %d fragments)", d.sync_every,
                      d.fragments);
      } else {
        std::snprintf(dp, sizeof dp, "diloco(every %d)", d.sync_every);
      }
      break;
    case DpAlgorithm::kSgp:
      std::snprintf(dp, sizeof dp, "sgp");
      break;
  }
  return dp;
}

std::string schedule_name(const SearchCandidate& c) {
  return c.auto_schedule ? "Auto" : std::string(sched::to_string(c.schedule));
}

std::string to_string(LayerRecompute r) {
  switch (r) {
    case LayerRecompute::kNone:
      return "none";
    case LayerRecompute::kSelective:
      return "selective";
    case LayerRecompute::kFull:
      return "full";
  }
  return "none";
}

LayerRecompute parse_layer_recompute(const std::string& text) {
  if (text == "none") return LayerRecompute::kNone;
  if (text == "selective") return LayerRecompute::kSelective;
  if (text == "full") return LayerRecompute::kFull;
  throw ConfigError("--recompute: '" + text + "' is not none, selective or full");
}

std::string describe(const SearchCandidate& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s pp=%d dp=%d v=%d m=%d mbs=%lld %s", schedule_name(c).c_str(),
                c.pp, c.dp, c.v, c.microbatches, static_cast<long long>(c.micro_batch_size),
                c.dp == 1 ? "-" : describe(c.dp_variant).c_str());
  std::string out = buf;
  if (c.tp > 1) out += " tp=" + std::to_string(c.tp) + (c.sequence_parallel ? " sp" : "");
  if (c.recompute != LayerRecompute::kNone) out += " recompute=" + to_string(c.recompute);
  if (c.precision != sched::Precision::kFp32)
    out += " precision=" + std::string(sched::to_string(c.precision));
  if (c.zero_stage > 0) out += " zero=" + std::to_string(c.zero_stage);
  return out;
}

// Note [Search pruning]
// Every plan a search builds runs each stage's forward and backward for at least one microbatch,
// and a stage's activations are held from its forward to its backward (a recomputed stage holds
// them again while its backward recomputes them), so some rank holds, at one instant, a stage's
// static state (parameters, gradients and optimizer state at the zero stage, and under bf16 /
// fp16 below ZeRO-3 the autocast copy, Note [Precision bytes]) plus one microbatch of its
// activations, counted as the memory model keeps them: at the job's precision but for the part
// autocast keeps in fp32 (StageCost::activation_fp32_bytes, Note [Autocast bytes]): exactly the
// bytes MemoryModel adds at the stage's F (halving them all undercounts a GPT block's by 2/34
// of its fp32 bytes, half its layer norms' inputs); and some rank holds at least the average
// static state of the ranks. Both are
// below sched::peak_memory's maximum over ranks for any plan of these costs, so a candidate whose
// bound exceeds the limit cannot fit: it is dropped before its plan is built or simulated.
// Shards are counted as floor(bytes / dp) (the memory model rounds them up) to stay below.
std::int64_t peak_memory_lower_bound(const sched::CostTable& costs, std::int32_t ranks,
                                     const sched::MemoryOptions& memory) {
  const double k = sched::optimizer_state_factor(memory.optimizer, memory.momentum);
  const int dp = std::max(memory.dp, 1);
  const int zero = dp > 1 ? memory.zero_stage : 0;
  const auto stat = [&](std::int64_t p) -> std::int64_t {
    const std::int64_t share = p / dp;
    const auto opt = static_cast<std::int64_t>(k * static_cast<double>(p));
    const auto opt_share = static_cast<std::int64_t>(k * static_cast<double>(share));
    std::int64_t bytes = 0;
    switch (zero) {
      case 0:
        bytes = 2 * p + opt;
        break;
      case 1:
        bytes = 2 * p + opt_share;
        break;
      case 2:
        bytes = p + share + opt_share;
        break;
      default:
        bytes = 2 * share + opt_share;
        break;
    }
    if (zero < 3 && memory.precision != sched::Precision::kFp32)
      bytes += sched::bytes_at_precision(p, sched::Precision::kFp32, memory.precision);
    return bytes;
  };
  std::int64_t heaviest = 0, total = 0;
  for (const auto& c : costs.stages) {
    const std::int64_t s = stat(c.param_bytes);
    total += s;
    // One microbatch's kept activations as the memory model holds them (Note [Autocast bytes]:
    // what autocast keeps in fp32 does not shrink).
    heaviest = std::max(heaviest, s + sched::activation_bytes_at_precision(
                                          c.activation_bytes, c.activation_fp32_bytes,
                                          costs.precision, memory.precision));
  }
  return costs.runtime_memory_bytes + std::max(heaviest, total / std::max(ranks, 1));
}

namespace search_detail {

// Steps needed to see each periodic collective at least once (amortised step time).
std::int32_t steps_for(const DpVariant& d) {
  switch (d.algorithm) {
    case DpAlgorithm::kDdp:
      return 1;
    case DpAlgorithm::kLocalSgd:
      return d.localsgd_frequency;
    case DpAlgorithm::kSlowMo:
      return std::max(d.localsgd_frequency, d.slowmo_frequency);
    case DpAlgorithm::kDiLoCo:
      return d.sync_every;
    case DpAlgorithm::kSgp:
      return 1;
  }
  return 1;
}

// Whether a transformer block's heads and hidden size split over tp.
bool tp_divides(const graph::Model& model, std::int32_t tp) {
  for (const auto& n : model.nodes) {
    if (n.kind != graph::NodeKind::kTransformerBlock) continue;
    for (const char* key : {"heads", "hidden"}) {
      const auto it = n.params.find(key);
      if (it != n.params.end() && it->second % tp != 0) return false;
    }
  }
  return true;
}

// Whether selective recompute changes anything: a transformer block with heads and hidden.
bool has_shaped_blocks(const graph::Model& model) {
  return std::any_of(model.nodes.begin(), model.nodes.end(), [](const graph::Node& n) {
    return n.kind == graph::NodeKind::kTransformerBlock && n.params.count("heads") != 0 &&
           n.params.count("hidden") != 0;
  });
}

// Whether no link costs anything (no cluster): then the simulated time does not depend on
// message bytes (precision) or on which data-parallel collectives run (zero stages 0-2).
bool communication_free(const Cluster& c) {
  const auto free = [](const Link& l) { return l.latency_ms == 0 && l.bandwidth_gb_per_s == 0; };
  return free(c.intra_node) && free(c.inter_node) &&
         (!c.collective_intra_node || free(*c.collective_intra_node)) &&
         (!c.collective_inter_node || free(*c.collective_inter_node));
}

// Whether the partition's stages form a chain (s feeds s + 1 only): then make_plan's plan for a
// named schedule depends on the shape alone.
bool is_chain(const graph::Partition& p) {
  const auto deps = p.graph.stage_dependencies();
  for (std::size_t k = 0; k < deps.size(); ++k) {
    const auto expect = static_cast<int>(k);
    if (deps[k].first != expect || deps[k].second != expect + 1) return false;
  }
  return static_cast<int>(deps.size()) == p.num_stages() - 1;
}

// Best throughput first; ties by shorter step, then by lower peak memory, then by the
// enumeration order (stable sort). Rows equal but for the schedule (and v) in what a user runs
// and gets collapse into the better-ranked one. The Pareto front: sorted by throughput (then
// memory), a row is on it when its peak is below every faster row's.
void rank_candidates(std::vector<SearchCandidate> fitting, std::int32_t top_k,
                     SearchResult& result) {
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const SearchCandidate& a, const SearchCandidate& b) {
                     if (a.throughput_samples_per_s != b.throughput_samples_per_s)
                       return a.throughput_samples_per_s > b.throughput_samples_per_s;
                     if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
                     return a.peak_memory_bytes < b.peak_memory_bytes;
                   });
  std::vector<SearchCandidate> distinct;
  using Key = std::tuple<std::int32_t, std::int32_t, std::int32_t, bool, std::int64_t, std::int32_t,
                         std::string, std::int32_t, int, int, std::int64_t, std::int64_t>;
  std::set<Key> seen;
  for (auto& cand : fitting) {
    const Key key{cand.pp,
                  cand.dp,
                  cand.tp,
                  cand.sequence_parallel,
                  cand.micro_batch_size,
                  cand.microbatches,
                  cand.dp == 1 ? std::string("-") : describe(cand.dp_variant),
                  cand.zero_stage,
                  static_cast<int>(cand.recompute),
                  static_cast<int>(cand.precision),
                  cand.step_ns,
                  cand.peak_memory_bytes};
    if (!seen.insert(key).second) {
      ++result.collapsed;
      continue;
    }
    distinct.push_back(std::move(cand));
  }
  // Throughput descending, memory ascending within equal throughput: a row is on the front when
  // every faster row holds more memory and no equally fast row holds less (rows equal in both
  // are all on it).
  std::int64_t lowest = INT64_MAX;  // over the strictly faster rows
  for (std::size_t i = 0; i < distinct.size();) {
    std::size_t j = i;
    while (j < distinct.size() &&
           distinct[j].throughput_samples_per_s == distinct[i].throughput_samples_per_s)
      ++j;
    const std::int64_t least = distinct[i].peak_memory_bytes;  // the group's smallest
    for (std::size_t k = i; k < j; ++k) {
      auto& cand = distinct[k];
      if (cand.peak_memory_bytes == least && least < lowest) {
        cand.pareto = true;
        result.pareto.push_back(cand);
      }
    }
    lowest = std::min(lowest, least);
    i = j;
  }
  const auto sync = std::find_if(distinct.begin(), distinct.end(),
                                 [](const SearchCandidate& x) { return x.synchronous(); });
  if (sync != distinct.end()) result.best_synchronous = *sync;
  if (top_k > 0 && distinct.size() > static_cast<std::size_t>(top_k))
    distinct.resize(static_cast<std::size_t>(top_k));
  result.ranked = std::move(distinct);
}

// Note [Search bounds]
// Most candidates of a large search cannot matter: a row is shown when it is among the top_k by
// throughput or on the Pareto front. A fitting candidate is simulated only when neither can be
// ruled out; it is ruled out when its throughput cannot exceed the bound samples / (the busiest
// rank's compute time, step_lower_bound_ns), and (a) top_k simulated rows of distinct
// throughputs are faster than that bound (rows of distinct throughput never collapse into one),
// and (b) a simulated row at most as large in peak memory is faster than it (so it is not on the
// front). Candidates are simulated in order of their bound, best first, so that strong
// references come early. A candidate is first tested with its closed-form memory bound (Note
// [Search pruning]), then (ZeRO-3) with the peak of gathering around each compute action alone,
// which no placement undercuts (when that peak is over the limit it is the exact one: kFit keeps
// those windows on every rank they do not fit, and every other rank fits, so the fitting
// placement is not built), and only then with its exact peak. A synchronous candidate is
// measured against synchronous rows only, so
// the best synchronous row is never ruled out by a local-step one. Ruled-out candidates are
// counted (SearchResult::bounded), not ranked.
std::int64_t step_lower_bound_ns(const sched::CostTable& costs, sched::ScheduleKind kind,
                                 bool automatic, std::int32_t pp, std::int32_t v, std::int32_t m,
                                 bool full_recompute, bool chain) {
  const auto stages = static_cast<std::int32_t>(costs.stages.size());
  if (pp < 1 || stages < 1) return 0;
  // One microbatch's compute of stage s: F, the backward (B, or I + W: the smaller), again F
  // when recomputed.
  const auto work = [&](std::int32_t s) {
    const auto& c = costs.stages[static_cast<std::size_t>(s)];
    const double backward =
        std::min(c.backward_ms, c.input_grad_or_default_ms() + c.weight_grad_or_default_ms());
    return c.forward_ms + backward + (full_recompute ? c.forward_ms : 0.0);
  };
  double total = 0;
  for (std::int32_t s = 0; s < stages; ++s) total += work(s);
  // Every plan runs m microbatches through every stage (Chimera's replicas split them): the
  // ranks' average.
  double busiest = static_cast<double>(m) * total / pp;
  // Where the stages live: rank r holds r, r + pp, ... (looped), or r and 2pp - 1 - r (V); its
  // first stage is r, so the forwards of stages 0 .. r - 1 come first. Auto's and Chimera's
  // placements are not assumed.
  const bool placed = !automatic && kind != sched::ScheduleKind::kChimera && stages == pp * v;
  if (placed) {
    double fill = 0;
    for (std::int32_t r = 0; r < pp; ++r) {
      double mine = 0;
      if (sched::is_v_shaped(kind) && v == 2) {
        mine = work(r) + work(2 * pp - 1 - r);
      } else {
        for (std::int32_t s = r; s < stages; s += pp) mine += work(s);
      }
      busiest = std::max(busiest, (chain ? fill : 0.0) + static_cast<double>(m) * mine);
      fill += costs.stages[static_cast<std::size_t>(r)].forward_ms;
    }
  }
  // Below the simulator's rounding of each action to whole nanoseconds (one per action).
  const double actions = 3.0 * m * stages;
  return std::max<std::int64_t>(static_cast<std::int64_t>(busiest * 1e6 * (1 - 1e-9) - actions), 0);
}

void References::add(std::int64_t peak, double throughput) {
  best_.insert(throughput);
  if (top_k_ > 0 && best_.size() > static_cast<std::size_t>(top_k_)) best_.erase(best_.begin());
  auto it = staircase_.upper_bound(peak);
  if (it != staircase_.begin() && std::prev(it)->second >= throughput) return;  // dominated
  staircase_[peak] = throughput;
  it = staircase_.upper_bound(peak);
  while (it != staircase_.end() && it->second <= throughput) it = staircase_.erase(it);
}

bool References::excludes(std::int64_t peak, double bound) const {
  if (top_k_ <= 0 || best_.size() < static_cast<std::size_t>(top_k_) || !(*best_.begin() > bound))
    return false;
  const auto it = staircase_.upper_bound(peak);
  return it != staircase_.begin() && std::prev(it)->second > bound;
}

}  // namespace search_detail
}  // namespace pipewright::sim
