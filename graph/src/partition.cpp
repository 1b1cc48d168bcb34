// Partitioning algorithms (docs/partitioning.md). All three cut one topological order of the
// model into contiguous runs, which keeps the stage graph acyclic for any DAG.
#include "pipewright/graph/partition.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::graph {

namespace {

// A value an item reads from an earlier item: the producer's position in the order, the value's
// id (one per (node, output)) and its bytes per microbatch.
struct Pred {
  std::size_t position = 0;
  std::size_t value = 0;
  std::int64_t bytes = 0;
};

// Per-position data along the topological order.
struct Item {
  int node = 0;
  double ms = 0.0;  // forward + backward
  std::int64_t param_bytes = 0;
  std::int64_t activation_bytes = 0;
  std::int64_t activation_fp32_bytes = 0;  // autocast_fp32_bytes (Note [Stage memory])
  std::vector<Pred> preds;  // distinct values read from other nodes (filled for recompute only)
};

// A run's activation bytes per microbatch, and the part of them autocast keeps in fp32.
struct Acts {
  std::int64_t all = 0;
  std::int64_t fp32 = 0;

  static Acts of(const Item& it) noexcept {
    return Acts{it.activation_bytes, it.activation_fp32_bytes};
  }
  friend Acts operator+(Acts a, Acts b) noexcept { return Acts{a.all + b.all, a.fp32 + b.fp32}; }
};

// Segment boundaries: segment k covers items [starts[k], starts[k+1]) (with starts.back() == n
// implied).
using Starts = std::vector<std::size_t>;

// A run of items from the packer: it starts at item `begin` and must end up on stage index
// `stage` or later (Note [Greedy with stage-dependent memory]).
struct Run {
  std::size_t begin = 0;
  int stage = 0;
};
using Runs = std::vector<Run>;

std::uint64_t to_bits(double v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

double from_bits(std::uint64_t bits) {
  double v = 0.0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

class Packer {
 public:
  Packer(const std::vector<Item>& items, int stages, const PartitionOptions& options,
         std::optional<std::int64_t> limit)
      : items_(items), stages_(stages), options_(options), limit_(limit) {
    std::size_t values = 0;
    for (const Item& it : items_)
      for (const Pred& p : it.preds) values = std::max(values, p.value + 1);
    seen_.assign(values, 0);
  }

  // Input bytes (Note [Stage memory], recompute) of a run holding item i alone.
  std::int64_t inputs_alone(std::size_t i) const {
    ++run_;
    return new_inputs(i, i, false);
  }

  // Greedy packing: each stage takes items while its time stays <= max_ms and its memory fits.
  // An item that does not fit even alone on the next stage index is placed on the first later
  // index where it fits ("bumping"); the skipped indices are realised later by splitting earlier
  // runs (realise_bumps). Returns false if the items need more than `stages_` stages; then
  // `failed_at` is the item that did not fit.
  //
  // Note [Greedy with stage-dependent memory]
  // Run time and memory only grow when a run grows, and the memory limit of a stage index is
  // never tighter than that of an earlier index (in-flight counts do not increase with the index).
  // By induction over the items, greedy places every item on a stage index no later than any
  // feasible assignment does (and, on the same index, in a run that starts no earlier), so it
  // fails only if no feasible assignment exists. Splitting a run into pieces on the same or later
  // indices keeps every piece feasible, which is what realise_bumps and split_to rely on.
  // With recompute, a stage's memory also counts its input bytes, which a later start can make
  // larger: then greedy is a heuristic, and partition_model checks the final stages' memory.
  bool pack(double max_ms, Runs* runs, std::size_t* failed_at = nullptr) const {
    if (runs != nullptr) runs->assign(1, Run{0, 0});
    int stage = 0;
    double ms = 0.0;
    std::int64_t params = 0;
    Acts acts;
    std::int64_t ins = 0;
    std::size_t begin = 0;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      const Item& it = items_[i];
      const bool first = i == 0;
      if (first || !fits(stage, ms + it.ms, params + it.param_bytes, acts + Acts::of(it),
                         ins + new_inputs(i, begin, false), max_ms)) {
        if (!first) ++stage;
        const std::int64_t alone = inputs_alone(i);
        begin = i;
        // Bump while the item alone does not fit; stages 0..stage-1 need >= stage earlier items.
        while (!fits(stage, it.ms, it.param_bytes, Acts::of(it), alone, max_ms)) {
          ++stage;
          if (static_cast<std::size_t>(stage) > i || stage >= stages_) break;
        }
        if (stage >= stages_ || static_cast<std::size_t>(stage) > i ||
            !fits(stage, it.ms, it.param_bytes, Acts::of(it), alone, max_ms)) {
          if (failed_at != nullptr) *failed_at = i;
          return false;
        }
        if (runs != nullptr && !first) runs->push_back(Run{i, stage});
        if (runs != nullptr && first) runs->back().stage = stage;
        ms = 0.0;
        params = 0;
        acts = Acts{};
        ins = 0;
      }
      ins += new_inputs(i, begin, true);
      ms += it.ms;
      params += it.param_bytes;
      acts = acts + Acts::of(it);
    }
    return true;
  }

 private:
  bool fits(int stage, double ms, std::int64_t params, Acts acts, std::int64_t ins,
            double max_ms) const {
    if (ms > max_ms) return false;
    if (!limit_) return true;
    const int in_flight = in_flight_microbatches(stage, stages_, options_);
    return stage_memory_bytes(params, acts.all, acts.fp32, in_flight, options_, ins) <= *limit_;
  }

  // Bytes of the values item i reads from items before `begin` that the current run (run_) has
  // not counted yet; `mark` counts them.
  std::int64_t new_inputs(std::size_t i, std::size_t begin, bool mark) const {
    std::int64_t bytes = 0;
    for (const Pred& p : items_[i].preds) {
      if (p.position >= begin || seen_[p.value] == run_) continue;
      bytes += p.bytes;
      if (mark) seen_[p.value] = run_;
    }
    return bytes;
  }

  const std::vector<Item>& items_;
  int stages_;
  const PartitionOptions& options_;
  std::optional<std::int64_t> limit_;
  mutable std::vector<std::size_t> seen_;  // value id -> the run that counted it
  mutable std::size_t run_ = 0;
};

// Splits earlier runs until every run starts at or after its required stage index: before run j
// there must be at least runs[j].stage runs. Each split halves (by time) the slowest splittable
// run before it.
Starts realise_bumps(const std::vector<Item>& items, const Runs& runs) {
  Starts starts;
  for (const Run& run : runs) {
    while (static_cast<int>(starts.size()) < run.stage) {
      std::size_t best = starts.size();
      double best_ms = -1.0;
      for (std::size_t k = 0; k < starts.size(); ++k) {
        const std::size_t end = k + 1 < starts.size() ? starts[k + 1] : run.begin;
        if (end - starts[k] < 2) continue;
        double ms = 0.0;
        for (std::size_t i = starts[k]; i < end; ++i) ms += items[i].ms;
        if (ms > best_ms) {
          best_ms = ms;
          best = k;
        }
      }
      PW_ASSERT(best < starts.size(), "no run to split before item " << run.begin);
      const std::size_t end = best + 1 < starts.size() ? starts[best + 1] : run.begin;
      double left = 0.0;
      std::size_t cut = starts[best] + 1;
      for (std::size_t i = starts[best]; i + 1 < end && left + items[i].ms <= best_ms / 2.0; ++i) {
        left += items[i].ms;
        cut = i + 1;
      }
      cut = std::clamp(cut, starts[best] + 1, end - 1);
      starts.insert(starts.begin() + static_cast<std::ptrdiff_t>(best) + 1, cut);
    }
    starts.push_back(run.begin);
  }
  return starts;
}

// Adds cuts until there are exactly `stages` runs, always halving (by time) the slowest run that
// has two or more items. Every new run is a subset of an old one at the same or a later stage
// index, so no run gets slower and (Note [Stage memory]: in-flight counts never grow with the
// index) none needs more memory.
Starts split_to(const std::vector<Item>& items, Starts starts, int stages) {
  const std::size_t n = items.size();
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + items[i].ms;
  using Run = std::tuple<double, std::size_t, std::size_t>;  // (ms, begin, end)
  std::priority_queue<Run> runs;
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const std::size_t begin = starts[k];
    const std::size_t end = k + 1 < starts.size() ? starts[k + 1] : n;
    if (end - begin >= 2) runs.emplace(prefix[end] - prefix[begin], begin, end);
  }
  while (static_cast<int>(starts.size()) < stages) {
    PW_ASSERT(!runs.empty(), "not enough items to split into " << stages << " stages");
    const auto [ms, begin, end] = runs.top();
    runs.pop();
    // First cut point where the left part reaches half the time, kept strictly inside the run.
    const double half = prefix[begin] + ms / 2.0;
    auto cut = static_cast<std::size_t>(
        std::lower_bound(prefix.begin() + static_cast<std::ptrdiff_t>(begin) + 1,
                         prefix.begin() + static_cast<std::ptrdiff_t>(end), half) -
        prefix.begin());
    cut = std::clamp(cut, begin + 1, end - 1);
    starts.push_back(cut);
    if (cut - begin >= 2) runs.emplace(prefix[cut] - prefix[begin], begin, cut);
    if (end - cut >= 2) runs.emplace(prefix[end] - prefix[cut], cut, end);
  }
  std::sort(starts.begin(), starts.end());
  return starts;
}

Starts uniform_starts(std::size_t n, int stages) {
  Starts starts;
  const std::size_t p = static_cast<std::size_t>(stages);
  std::size_t at = 0;
  for (std::size_t s = 0; s < p; ++s) {
    starts.push_back(at);
    at += n / p + (s < n % p ? 1 : 0);
  }
  return starts;
}

// Item::preds from the model's edges: one entry per distinct (producer node, output) an item reads.
void add_preds(const Model& model, std::vector<Item>* items) {
  std::vector<std::size_t> position(model.nodes.size(), 0);
  for (std::size_t i = 0; i < items->size(); ++i)
    position[static_cast<std::size_t>((*items)[i].node)] = i;
  std::map<std::pair<int, int>, std::size_t> value_ids;
  for (const ModelEdge& e : model.edges) {
    const auto id = value_ids.emplace(std::pair{e.from, e.from_output}, value_ids.size()).first;
    Item& to = (*items)[position[static_cast<std::size_t>(e.to)]];
    const bool seen = std::any_of(to.preds.begin(), to.preds.end(),
                                  [&](const Pred& p) { return p.value == id->second; });
    if (seen) continue;
    to.preds.push_back(Pred{position[static_cast<std::size_t>(e.from)], id->second,
                            model.nodes[static_cast<std::size_t>(e.from)].cost.output_bytes});
  }
}

[[noreturn]] void memory_infeasible(const Model& model, const std::vector<Item>& items,
                                    const Packer& packer, int stages,
                                    const PartitionOptions& options) {
  const std::int64_t limit = *options.memory_limit_bytes;
  // A node that does not fit even alone on the last stage (the loosest limit) can never fit.
  const int last_in_flight = in_flight_microbatches(stages - 1, stages, options);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const std::int64_t alone =
        stage_memory_bytes(it.param_bytes, it.activation_bytes, it.activation_fp32_bytes,
                           last_in_flight, options, packer.inputs_alone(i));
    if (alone > limit) {
      std::ostringstream os;
      os << "no partition meets the memory limit of " << limit << " bytes: node \""
         << model.nodes[static_cast<std::size_t>(it.node)].name << "\" alone needs " << alone
         << " bytes (param_bytes " << it.param_bytes << ", activation_bytes " << it.activation_bytes
         << " x " << last_in_flight << " in flight) even on the last stage";
      throw InvalidGraphError(os.str());
    }
  }
  std::size_t failed_at = 0;
  const bool ok = packer.pack(std::numeric_limits<double>::infinity(), nullptr, &failed_at);
  PW_ASSERT(!ok, "memory packing succeeded after failing");
  std::ostringstream os;
  os << "no partition into " << stages << " stages meets the memory limit of " << limit
     << " bytes: with every stage filled to the limit, node \""
     << model.nodes[static_cast<std::size_t>(items[failed_at].node)].name
     << "\" does not fit in the last stage (use more stages or a higher limit)";
  throw InvalidGraphError(os.str());
}

}  // namespace

std::string_view to_string(PartitionMethod method) noexcept {
  switch (method) {
    case PartitionMethod::kUniform:
      return "uniform";
    case PartitionMethod::kBalanced:
      return "balanced";
    case PartitionMethod::kMemory:
      return "memory";
  }
  return "balanced";
}

std::optional<PartitionMethod> parse_partition_method(std::string_view text) noexcept {
  if (text == "uniform") return PartitionMethod::kUniform;
  if (text == "balanced") return PartitionMethod::kBalanced;
  if (text == "memory") return PartitionMethod::kMemory;
  return std::nullopt;
}

int in_flight_microbatches(int stage, int stages, const PartitionOptions& options) noexcept {
  if (options.in_flight_microbatches) return *options.in_flight_microbatches;
  return std::max(1, stages - stage);
}

std::int64_t stage_memory_bytes(std::int64_t param_bytes, std::int64_t activation_bytes,
                                std::int64_t activation_fp32_bytes, int in_flight,
                                const PartitionOptions& options,
                                std::int64_t input_bytes) noexcept {
  // Note [Stage memory], mixed precision: 16-bit activations but for what autocast keeps in
  // fp32, 16-bit stage inputs (p2p messages), and autocast's parameter copies. In integers as
  // sched::activation_bytes_at_precision, so that the estimate is the memory model's bytes.
  const int element_bytes = options.activation_element_bytes;
  const double element = static_cast<double>(element_bytes) / 4.0;
  std::int64_t kept = activation_bytes;  // one microbatch's activations
  std::int64_t inputs = input_bytes;     // one microbatch's inputs (recompute)
  if (element_bytes < 4) {
    // bytes * element_bytes / 4 without overflowing (stage sums may be near INT64_MAX).
    const auto at_precision = [element_bytes](std::int64_t bytes) {
      return bytes / 4 * element_bytes + bytes % 4 * element_bytes / 4;
    };
    const std::int64_t fp32 = std::clamp<std::int64_t>(activation_fp32_bytes, 0, activation_bytes);
    kept = fp32 + at_precision(activation_bytes - fp32);
    inputs = at_precision(input_bytes);
  }
  const auto acts = static_cast<double>(kept);
  const double per_microbatch = options.recompute ? static_cast<double>(inputs) : acts;
  const double cast_cache =
      options.activation_element_bytes < 4 ? static_cast<double>(param_bytes) * element : 0.0;
  const double bytes =
      static_cast<double>(param_bytes) *
          (1.0 + options.gradient_bytes_per_param_byte + options.optimizer_bytes_per_param_byte) +
      cast_cache + static_cast<double>(in_flight) * per_microbatch +
      (options.recompute ? acts : 0.0);
  constexpr double kMax = 9.0e18;  // below INT64_MAX; estimates beyond are saturated
  return bytes >= kMax ? static_cast<std::int64_t>(kMax) : static_cast<std::int64_t>(bytes);
}

std::int64_t stage_input_bytes(const Model& model, const StageInfo& stage) {
  std::int64_t bytes = 0;
  for (const StageValue& v : stage.inputs) {
    if (v.node >= 0) bytes += model.nodes[static_cast<std::size_t>(v.node)].cost.output_bytes;
  }
  return bytes;
}

std::int64_t stage_activation_fp32_bytes(const Model& model, const StageInfo& stage) noexcept {
  std::int64_t bytes = 0;
  for (const int v : stage.nodes)
    bytes += autocast_fp32_bytes(model.nodes[static_cast<std::size_t>(v)]);
  return bytes;
}

double Partition::max_stage_ms() const noexcept {
  double worst = 0.0;
  for (const StageInfo& s : graph.stages) worst = std::max(worst, s.forward_ms + s.backward_ms);
  return worst;
}

Partition make_partition(const Model& model, const std::vector<int>& node_stage,
                         const PartitionOptions& options, std::string method) {
  Partition out;
  out.method = std::move(method);
  out.model_name = model.name;
  out.node_names.reserve(model.nodes.size());
  for (const Node& node : model.nodes) out.node_names.push_back(node.name);
  out.node_stage = node_stage;
  out.graph = build_stage_graph(model, node_stage, options.stages);
  out.gradient_bytes_per_param_byte = options.gradient_bytes_per_param_byte;
  out.optimizer_bytes_per_param_byte = options.optimizer_bytes_per_param_byte;
  out.in_flight_microbatches = options.in_flight_microbatches;
  out.memory_limit_bytes = options.memory_limit_bytes;
  out.recompute = options.recompute;
  out.activation_element_bytes = options.activation_element_bytes;
  for (StageInfo& stage : out.graph.stages) {
    stage.in_flight_microbatches = in_flight_microbatches(stage.index, options.stages, options);
    // The fp32 part matters only under 16-bit activations (Note [Stage memory]).
    const std::int64_t fp32 =
        options.activation_element_bytes < 4 ? stage_activation_fp32_bytes(model, stage) : 0;
    stage.memory_bytes =
        stage_memory_bytes(stage.param_bytes, stage.activation_bytes, fp32,
                           stage.in_flight_microbatches, options, stage_input_bytes(model, stage));
  }
  return out;
}

Partition partition_model(const Model& model, const PartitionOptions& options) {
  const std::size_t n = model.nodes.size();
  PW_CHECK(options.stages >= 1, ConfigError, "--stages must be >= 1, got " << options.stages);
  PW_CHECK(static_cast<std::size_t>(options.stages) <= n, ConfigError,
           "--stages " << options.stages << " is more than the model's " << n
                       << " nodes (every stage needs at least one node)");
  PW_CHECK(std::isfinite(options.gradient_bytes_per_param_byte) &&
               options.gradient_bytes_per_param_byte >= 0.0,
           ConfigError, "gradient bytes per parameter byte must be finite and >= 0");
  PW_CHECK(std::isfinite(options.optimizer_bytes_per_param_byte) &&
               options.optimizer_bytes_per_param_byte >= 0.0,
           ConfigError, "optimizer bytes per parameter byte must be finite and >= 0");
  PW_CHECK(options.activation_element_bytes == 2 || options.activation_element_bytes == 4,
           ConfigError,
           "activation element bytes must be 2 or 4, got " << options.activation_element_bytes);
  PW_CHECK(!options.in_flight_microbatches || *options.in_flight_microbatches >= 1, ConfigError,
           "in-flight microbatches must be >= 1, got " << *options.in_flight_microbatches);
  PW_CHECK(options.method != PartitionMethod::kMemory || options.memory_limit_bytes.has_value(),
           ConfigError, "--method memory needs --memory-limit BYTES");
  PW_CHECK(!options.memory_limit_bytes || *options.memory_limit_bytes > 0, ConfigError,
           "--memory-limit must be > 0, got " << *options.memory_limit_bytes);

  const std::vector<int> order = model.topological_order();
  const bool sixteen_bit = options.activation_element_bytes < 4;  // the fp32 part matters
  std::vector<Item> items;
  items.reserve(n);
  double max_item = 0.0;
  for (int v : order) {
    const Node& node = model.nodes[static_cast<std::size_t>(v)];
    const NodeCost& c = node.cost;
    items.push_back(
        Item{v, c.forward_ms + c.backward_ms, c.param_bytes, c.activation_bytes, 0, {}});
    if (sixteen_bit) items.back().activation_fp32_bytes = autocast_fp32_bytes(node);
    max_item = std::max(max_item, items.back().ms);
  }
  if (options.recompute) add_preds(model, &items);

  Starts starts;
  if (options.method == PartitionMethod::kUniform) {
    starts = uniform_starts(n, options.stages);
  } else {
    const std::optional<std::int64_t> limit =
        options.method == PartitionMethod::kMemory ? options.memory_limit_bytes : std::nullopt;
    const Packer packer(items, options.stages, options, limit);
    if (!packer.pack(std::numeric_limits<double>::infinity(), nullptr)) {
      memory_infeasible(model, items, packer, options.stages, options);
    }
    // Feasibility is monotone in the time bound, and non-negative doubles order like their bit
    // patterns, so bisecting the bits finds the smallest feasible bound exactly (<= 64 rounds of
    // O(n) packing). That bound is the optimal slowest stage.
    std::uint64_t lo = to_bits(max_item);  // no bound below the slowest single node works
    std::uint64_t hi = to_bits(std::numeric_limits<double>::infinity());
    if (packer.pack(max_item, nullptr)) hi = lo;
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (packer.pack(from_bits(mid), nullptr)) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    Runs runs;
    const bool ok = packer.pack(from_bits(hi), &runs);
    PW_ASSERT(ok, "the feasible bound stopped being feasible");
    starts = split_to(items, realise_bumps(items, runs), options.stages);
  }

  std::vector<int> node_stage(n, 0);
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const std::size_t end = k + 1 < starts.size() ? starts[k + 1] : n;
    for (std::size_t i = starts[k]; i < end; ++i) {
      node_stage[static_cast<std::size_t>(items[i].node)] = static_cast<int>(k);
    }
  }
  Partition out =
      make_partition(model, node_stage, options, std::string(to_string(options.method)));
  // With recompute the packer is a heuristic (Packer::pack): check what it produced.
  if (options.method == PartitionMethod::kMemory && options.recompute) {
    for (const StageInfo& st : out.graph.stages) {
      PW_CHECK(st.memory_bytes <= *options.memory_limit_bytes, InvalidGraphError,
               "no partition into " << options.stages << " stages found that meets the memory "
                                    << "limit of " << *options.memory_limit_bytes
                                    << " bytes with recompute: stage " << st.index << " needs "
                                    << st.memory_bytes << " bytes");
    }
  }
  return out;
}

}  // namespace pipewright::graph
