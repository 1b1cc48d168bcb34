#include "pipewright/sim/cost_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "costs/median.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::sim {
namespace {

double pick(const std::vector<double>& values, std::int32_t stage, const char* flag,
            std::int32_t stages) {
  PW_CHECK(values.size() == 1 || values.size() == static_cast<std::size_t>(stages), ConfigError,
           flag << " needs one value or one per stage (" << stages << "), got " << values.size());
  const double v = values.size() == 1 ? values[0] : values[static_cast<std::size_t>(stage)];
  PW_CHECK(std::isfinite(v) && v >= 0, ConfigError,
           flag << " must be finite and >= 0, got " << v
                << (values.size() == 1 ? std::string() : " for stage " + std::to_string(stage)));
  return v;
}

}  // namespace

sched::CostTable what_if_costs(const WhatIfCosts& w, std::int32_t stages) {
  PW_CHECK(!w.forward_ms.empty(), ConfigError, "--forward-ms is required for what-if costs");
  PW_CHECK(!w.backward_ms.empty(), ConfigError, "--backward-ms is required for what-if costs");
  PW_CHECK(w.activation_bytes >= 0, ConfigError,
           "--activation-bytes must be >= 0, got " << w.activation_bytes);
  PW_CHECK(w.param_bytes >= 0, ConfigError, "--param-bytes must be >= 0, got " << w.param_bytes);
  PW_CHECK(w.output_bytes >= 0, ConfigError, "--output-bytes must be >= 0, got " << w.output_bytes);
  sched::CostTable t;
  t.source = "cli";
  for (std::int32_t s = 0; s < stages; ++s) {
    sched::StageCost c;
    c.stage = s;
    c.forward_ms = pick(w.forward_ms, s, "--forward-ms", stages);
    c.backward_ms = pick(w.backward_ms, s, "--backward-ms", stages);
    if (!w.weight_ms.empty()) {
      const double wt = pick(w.weight_ms, s, "--weight-ms", stages);
      PW_CHECK(wt <= c.backward_ms, ConfigError,
               "--weight-ms (" << wt << ") exceeds --backward-ms (" << c.backward_ms
                               << ") for stage " << s << "; backward is the full B = I + W");
      c.weight_grad_ms = wt;
      c.input_grad_ms = c.backward_ms - wt;
    }
    c.activation_bytes = w.activation_bytes;
    c.param_bytes = w.param_bytes;
    c.output_bytes = w.output_bytes;
    t.stages.push_back(c);
  }
  set_weight_grad_keeps(t, w.weight_grad_keeps);
  return t;
}

void set_weight_grad_keeps(sched::CostTable& table, const std::vector<double>& shares) {
  if (shares.empty()) return;
  const auto stages = static_cast<std::int32_t>(table.stages.size());
  for (std::int32_t s = 0; s < stages; ++s) {
    const double v = pick(shares, s, "--weight-grad-keeps", stages);
    PW_CHECK(v <= 1, ConfigError,
             "--weight-grad-keeps is a share of the activation, in [0, 1], got "
                 << v << (shares.size() == 1 ? std::string() : " for stage " + std::to_string(s)));
    table.stages[static_cast<std::size_t>(s)].weight_grad_keeps = v;
  }
}

int CostSources::given() const noexcept {
  return static_cast<int>(!what_if.forward_ms.empty() || !what_if.backward_ms.empty()) +
         static_cast<int>(model != nullptr) + static_cast<int>(!profile_path.empty()) +
         static_cast<int>(table.has_value());
}

sched::CostTable stage_costs(const CostSources& sources, const sched::PlanShape& shape) {
  PW_CHECK(sources.given() == 1, ConfigError,
           "give exactly one cost source: --forward-ms/--backward-ms, --model [--partition], or "
           "--profile");
  sched::CostTable costs;
  if (sources.table) {
    costs = *sources.table;
  } else if (!sources.profile_path.empty()) {
    costs = sched::load_costs(sources.profile_path);
    if (sources.precision)
      sched::check_profile_precision(costs, sources.profile_path, *sources.precision);
  } else if (sources.model != nullptr) {
    PW_CHECK(sources.partition != nullptr, ConfigError, "model costs need the model's partition");
    costs = sched::costs_from_partition(*sources.model, *sources.partition);
  } else {
    costs = what_if_costs(sources.what_if, shape.model_stages());
  }
  if (sources.compute_overhead_ms) costs.compute_overhead_ms = *sources.compute_overhead_ms;
  return costs;
}

namespace {

// Per-node measured time of one kind: the stage's measured time split by the nodes' estimates
// (evenly when the stage's estimates sum to 0).
std::vector<double> spread(const graph::Model& model, const graph::Partition& from,
                           const std::vector<double>& stage_ms,
                           double (*estimate)(const graph::NodeCost&)) {
  const std::size_t n = model.nodes.size();
  std::vector<double> est_sum(stage_ms.size(), 0.0), count(stage_ms.size(), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = static_cast<std::size_t>(from.node_stage[i]);
    est_sum[s] += estimate(model.nodes[i].cost);
    count[s] += 1;
  }
  std::vector<double> out(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = static_cast<std::size_t>(from.node_stage[i]);
    out[i] = est_sum[s] > 0 ? stage_ms[s] * estimate(model.nodes[i].cost) / est_sum[s]
                            : stage_ms[s] / count[s];
  }
  return out;
}

// Per stage: whether it reads only the model's inputs (no other stage feeds it).
std::vector<bool> fed_by_model_inputs_only(const graph::Partition& p) {
  std::vector<bool> out(static_cast<std::size_t>(p.num_stages()), true);
  for (const auto& [producer, consumer] : p.graph.stage_dependencies())
    out[static_cast<std::size_t>(consumer)] = false;
  return out;
}

// I and W of a stage as fractions of its B, with B's distribution scaled likewise.
void split_backward(sched::StageCost& c, double input_ratio, double weight_ratio) {
  c.input_grad_ms = input_ratio * c.backward_ms;
  c.weight_grad_ms = weight_ratio * c.backward_ms;
  if (c.backward_stats) {
    c.input_grad_stats = c.backward_stats->scaled(input_ratio);
    c.weight_grad_stats = c.backward_stats->scaled(weight_ratio);
  }
}

}  // namespace

namespace {

// Note [Profile partition check]: a profile carries each stage's measured parameter bytes, and
// the partition it was measured on fixes how the model's parameters fall into stages. A profile
// from another partition with the same stage count splits them differently; each stage's share of
// all parameters is compared (shares, not bytes: the executor counts the tensors it built, which
// may differ from the model's estimate by a common factor such as a dtype). Stages whose share
// differs by more than kMaxShareGap are named. Profiles without parameter bytes are not checked.
constexpr double kMaxShareGap = 0.03;  // 3 percentage points

// "nodes embed..block3" of stage `s`.
std::string stage_nodes(const graph::Partition& p, std::size_t s) {
  std::string first, last;
  for (std::size_t i = 0; i < p.node_stage.size() && i < p.node_names.size(); ++i) {
    if (p.node_stage[i] != static_cast<int>(s)) continue;
    if (first.empty()) first = p.node_names[i];
    last = p.node_names[i];
  }
  return first == last ? "node " + first : "nodes " + first + ".." + last;
}

void check_profile_partition(const graph::Model& model, const graph::Partition& from,
                             const sched::CostTable& measured) {
  const sched::CostTable expected = sched::costs_from_partition(model, from);
  double total_measured = 0;
  double total_expected = 0;
  for (const auto& c : measured.stages) total_measured += static_cast<double>(c.param_bytes);
  for (const auto& c : expected.stages) total_expected += static_cast<double>(c.param_bytes);
  if (total_measured <= 0 || total_expected <= 0) return;
  std::ostringstream differs;
  int n = 0;
  for (std::size_t s = 0; s < measured.stages.size() && s < expected.stages.size(); ++s) {
    const double pm = static_cast<double>(measured.stages[s].param_bytes) / total_measured;
    const double pe = static_cast<double>(expected.stages[s].param_bytes) / total_expected;
    if (std::fabs(pm - pe) <= kMaxShareGap) continue;
    differs << (n++ > 0 ? "; " : "") << "stage " << s << " holds " << std::fixed
            << std::setprecision(1) << 100 * pm << "% of the parameters ("
            << measured.stages[s].param_bytes << " B) in the profile but " << 100 * pe << "% ("
            << expected.stages[s].param_bytes << " B, " << stage_nodes(from, s) << ") in --from";
  }
  PW_CHECK(n == 0, ConfigError,
           "profile transfer: the profile was measured on another partition than --from: "
               << differs.str());
}

// Note [Measured bytes in transfers]: the model's byte annotations are estimates at the model's
// own element size and micro-batch size (`pipewright model gpt` assumes 2-byte mixed precision
// and micro batch 1), while the executor counts the tensors it built and sent. A transfer takes
// the bytes from the profile: each measured stage's parameter tensors (param_sizes_bytes, in
// module order, which is node order) go to the nodes of that stage in the order of the model's
// per-node parameter bytes (a tensor belongs to the node whose share of the stage's bytes holds
// the tensor's middle), and a new stage holds its nodes' tensors; without measured tensor sizes
// the measured stage bytes are spread in proportion to the model's. Message sizes are the
// model's, times the median over measured stages of measured / model output bytes (both at the
// profile's precision). Before this, a fp32 run's profile moved to another partition of a
// 2-byte model priced DDP's all-reduce and the messages at half size (bench/fidelity.sh,
// interleaved cells: DDP step 47.8 ms from the transfer against 55.7 ms from the run's own
// profile).
struct MeasuredBytes {
  std::vector<std::vector<std::int64_t>> node_tensors;  // per model node, measured tensor bytes
  std::vector<double> node_bytes;                       // per model node, measured param bytes
  double output_ratio = 1.0;                            // measured / model message bytes
};

MeasuredBytes measured_bytes(const graph::Model& model, const graph::Partition& from,
                             const sched::CostTable& measured) {
  const std::size_t n = model.nodes.size();
  MeasuredBytes out;
  out.node_tensors.assign(n, {});
  std::vector<double> stage_bytes;
  for (const auto& c : measured.stages) stage_bytes.push_back(static_cast<double>(c.param_bytes));
  out.node_bytes = spread(model, from, stage_bytes, [](const graph::NodeCost& c) {
    return static_cast<double>(c.param_bytes);
  });
  for (std::size_t s = 0; s < measured.stages.size(); ++s) {
    const auto& sizes = measured.stages[s].param_sizes_bytes;
    std::vector<std::size_t> nodes;
    for (std::size_t i = 0; i < n; ++i)
      if (from.node_stage[i] == static_cast<int>(s)) nodes.push_back(i);
    if (nodes.empty() || sizes.empty()) continue;
    double total = 0;
    for (auto b : sizes) total += static_cast<double>(b);
    // Node k owns the middles in [bound[k], bound[k + 1]) of the stage's bytes.
    double node_total = 0;
    for (auto i : nodes) node_total += out.node_bytes[i];
    std::vector<double> bound{0.0};
    for (auto i : nodes)
      bound.push_back(bound.back() + (node_total > 0 ? total * out.node_bytes[i] / node_total
                                                     : total / static_cast<double>(nodes.size())));
    double at = 0;
    std::size_t k = 0;
    for (auto b : sizes) {
      const double mid = at + static_cast<double>(b) / 2;
      while (k + 1 < nodes.size() && mid >= bound[k + 1]) ++k;
      out.node_tensors[nodes[k]].push_back(b);
      at += static_cast<double>(b);
    }
    for (auto i : nodes) {  // the stage's bytes as its nodes' tensors add up
      double sum = 0;
      for (auto b : out.node_tensors[i]) sum += static_cast<double>(b);
      out.node_bytes[i] = sum;
    }
  }
  const sched::CostTable model_from = sched::costs_from_partition(model, from);
  std::vector<double> ratios;
  for (std::size_t s = 0; s < measured.stages.size() && s < model_from.stages.size(); ++s) {
    const auto model_out = sched::bytes_at_precision(model_from.stages[s].output_bytes,
                                                     sched::Precision::kFp32, measured.precision);
    if (measured.stages[s].output_bytes > 0 && model_out > 0)
      ratios.push_back(static_cast<double>(measured.stages[s].output_bytes) /
                       static_cast<double>(model_out));
  }
  if (!ratios.empty()) out.output_ratio = median(ratios);
  return out;
}

}  // namespace

sched::CostTable transfer_profile(const graph::Model& model, const graph::Partition& from,
                                  const sched::CostTable& measured, const graph::Partition& to) {
  graph::check_partition_matches(from, model);
  graph::check_partition_matches(to, model);
  PW_CHECK(static_cast<int>(measured.stages.size()) == from.num_stages(), ConfigError,
           "profile transfer: the profile has " << measured.stages.size()
                                                << " stages but the partition it was measured on "
                                                   "has "
                                                << from.num_stages());
  check_profile_partition(model, from, measured);
  sched::CostTable t = sched::costs_from_partition(model, to);
  t.source = "transfer:" + measured.source;
  // The measured times and activation bytes are the profile's precision's; the model's message
  // sizes are fp32 (Note [Precision bytes] in sched/memory.hpp).
  t.precision = measured.precision;
  // Note [Measured bytes in transfers]
  const MeasuredBytes bytes = measured_bytes(model, from, measured);
  for (auto& c : t.stages) {
    c.output_bytes = static_cast<std::int64_t>(std::llround(
        bytes.output_ratio * static_cast<double>(sched::bytes_at_precision(
                                 c.output_bytes, sched::Precision::kFp32, measured.precision))));
    const auto& nodes = to.graph.stages[static_cast<std::size_t>(c.stage)].nodes;
    std::vector<std::int64_t> sizes;
    double total = 0;
    bool tensors = true;
    for (int i : nodes) {
      const auto k = static_cast<std::size_t>(i);
      total += bytes.node_bytes[k];
      tensors = tensors && (!bytes.node_tensors[k].empty() || bytes.node_bytes[k] == 0);
      sizes.insert(sizes.end(), bytes.node_tensors[k].begin(), bytes.node_tensors[k].end());
    }
    if (total > 0 || c.param_bytes == 0) {
      c.param_bytes = static_cast<std::int64_t>(std::llround(total));
      if (tensors) {
        c.param_sizes_bytes = std::move(sizes);
      } else if (!c.param_sizes_bytes.empty()) {  // the model's tensors, at the measured scale
        double model_total = 0;
        for (auto b : c.param_sizes_bytes) model_total += static_cast<double>(b);
        c.param_bytes = 0;
        for (auto& b : c.param_sizes_bytes) {
          b = static_cast<std::int64_t>(
              std::llround(static_cast<double>(b) * total / std::max(1.0, model_total)));
          c.param_bytes += b;
        }
      }
    }
  }
  t.compute_overhead_ms = measured.compute_overhead_ms;
  t.comm_overhead_ms = measured.comm_overhead_ms;
  t.comm_send_ms = measured.comm_send_ms;
  t.dp_sync_compute_ms = measured.dp_sync_compute_ms;  // the measured job's parameters, as is
  t.step_overhead_ms = measured.step_overhead_ms;
  t.runtime_memory_bytes = measured.runtime_memory_bytes;
  t.p2p = measured.p2p;
  t.cores_per_node = measured.cores_per_node;
  t.p2p_uses_core = measured.p2p_uses_core;
  t.nodes = measured.nodes;
  t.step_correlation = measured.step_correlation;
  t.rank_step_correlation = measured.rank_step_correlation;
  const std::size_t S = measured.stages.size();
  bool split = true;
  for (const auto& c : measured.stages) split = split && c.input_grad_ms && c.weight_grad_ms;
  // Note [Input gradients of first stages]: a stage fed only by the model's inputs (token ids)
  // has no input gradient to compute, so its measured I is ~0 and its W is the whole backward.
  // Its layers' own I and W are those of the other stages' layers: their medians of I / B and
  // W / B, applied to its B. A new stage fed only by the model's inputs gets the measured first
  // stages' I / B and W / B instead. (Without this, the layers of a measured first stage moved
  // to a middle stage brought I ~ 0 along: zero-bubble transfers predicted 15-35% fast.)
  const std::vector<bool> from_first = fed_by_model_inputs_only(from);
  const std::vector<bool> to_first = fed_by_model_inputs_only(to);
  std::vector<double> mid_i, mid_w, first_i, first_w;
  for (std::size_t s = 0; s < S && split; ++s) {
    const auto& c = measured.stages[s];
    if (c.backward_ms <= 0) continue;
    (from_first[s] ? first_i : mid_i).push_back(*c.input_grad_ms / c.backward_ms);
    (from_first[s] ? first_w : mid_w).push_back(*c.weight_grad_ms / c.backward_ms);
  }
  const bool regroup = !mid_i.empty() && !first_i.empty();
  sched::CostTable own = measured;  // first stages with their layers' own I and W
  if (regroup) {
    const double ri = median(mid_i), rw = median(mid_w);
    for (std::size_t s = 0; s < S; ++s)
      if (from_first[s]) split_backward(own.stages[s], ri, rw);
  }
  std::vector<double> f(S), b(S), in(S), w(S), opt(S), act(S), f_spread(S), b_spread(S);
  bool has_opt = true;
  for (std::size_t s = 0; s < S; ++s) {
    const auto& c = own.stages[s];
    f[s] = c.forward_ms;
    b[s] = c.backward_ms;
    in[s] = c.input_grad_or_default_ms();
    w[s] = c.weight_grad_or_default_ms();
    has_opt = has_opt && c.optimizer_ms.has_value();
    opt[s] = c.optimizer_ms.value_or(0);
    act[s] = static_cast<double>(c.activation_bytes);
  }
  auto fwd = [](const graph::NodeCost& c) { return c.forward_ms; };
  auto bwd = [](const graph::NodeCost& c) { return c.backward_ms; };
  auto inp = [](const graph::NodeCost& c) {
    return c.input_grad_ms ? *c.input_grad_ms : c.backward_ms / 2;
  };
  auto wgt = [](const graph::NodeCost& c) {
    return c.weight_grad_ms ? *c.weight_grad_ms : c.backward_ms - c.backward_ms / 2;
  };
  auto par = [](const graph::NodeCost& c) { return static_cast<double>(c.param_bytes); };
  const auto nf = spread(model, from, f, fwd);
  const auto nb = spread(model, from, b, bwd);
  const auto ni = spread(model, from, in, inp);
  const auto nw = spread(model, from, w, wgt);
  const auto no = spread(model, from, opt, par);
  auto acts = [](const graph::NodeCost& c) { return static_cast<double>(c.activation_bytes); };
  const auto na = spread(model, from, act, acts);
  // Relative spread (p10, p90 over median) of a kind's stats, weighted by each source stage's
  // share of the new stage's time.
  auto stats = [&](const std::vector<double>& node_ms, const std::vector<int>& nodes,
                   std::optional<sched::KindStats> sched::StageCost::*member,
                   double total) -> std::optional<sched::KindStats> {
    if (total <= 0) return std::nullopt;
    double lo = 0, hi = 0, mean = 0, weight = 0;
    std::vector<double> rel(21, 0.0);
    bool quantiles = true;
    bool means = true;
    std::int64_t samples = 0;
    for (int n : nodes) {
      const auto src = static_cast<std::size_t>(from.node_stage[static_cast<std::size_t>(n)]);
      const auto& st = own.stages[src].*member;
      if (!st || st->median_ms <= 0) return std::nullopt;
      const double share = node_ms[static_cast<std::size_t>(n)];
      lo += share * st->p10_ms / st->median_ms;
      hi += share * st->p90_ms / st->median_ms;
      means = means && st->mean_ms.has_value();
      if (means) mean += share * *st->mean_ms / st->median_ms;
      quantiles = quantiles && st->quantiles_ms.size() == 21;
      for (std::size_t k = 0; quantiles && k < 21; ++k)
        rel[k] += share * st->quantiles_ms[k] / st->median_ms;
      weight += share;
      samples = std::max(samples, st->samples);
    }
    if (weight <= 0) return std::nullopt;
    sched::KindStats out;
    out.median_ms = total;
    out.p10_ms = total * lo / weight;
    out.p90_ms = total * hi / weight;
    out.samples = samples;
    if (means) out.mean_ms = total * mean / weight;  // the shared-cores cost (Note [Shared cores])
    if (quantiles) {
      for (double r : rel) out.quantiles_ms.push_back(total * r / weight);
    }
    return out;
  };
  for (auto& c : t.stages) {
    const auto& nodes = to.graph.stages[static_cast<std::size_t>(c.stage)].nodes;
    double sf = 0, sb = 0, si = 0, sw = 0, so = 0, sa = 0;
    for (int n : nodes) {
      const auto k = static_cast<std::size_t>(n);
      sf += nf[k];
      sb += nb[k];
      si += ni[k];
      sw += nw[k];
      so += no[k];
      sa += na[k];
    }
    // Note [Autocast bytes]: the model's fp32 share of the stage, applied to the measured bytes.
    if (c.activation_bytes > 0) {
      c.activation_fp32_bytes =
          static_cast<std::int64_t>(sa * static_cast<double>(c.activation_fp32_bytes) /
                                        static_cast<double>(c.activation_bytes) +
                                    0.5);
    }
    c.activation_bytes = static_cast<std::int64_t>(sa + 0.5);
    c.forward_ms = sf;
    c.backward_ms = sb;
    c.forward_stats = stats(nf, nodes, &sched::StageCost::forward_stats, sf);
    c.backward_stats = stats(nb, nodes, &sched::StageCost::backward_stats, sb);
    if (split) {
      c.input_grad_ms = si;
      c.weight_grad_ms = sw;
      c.input_grad_stats = stats(ni, nodes, &sched::StageCost::input_grad_stats, si);
      c.weight_grad_stats = stats(nw, nodes, &sched::StageCost::weight_grad_stats, sw);
      if (regroup && to_first[static_cast<std::size_t>(c.stage)]) {
        c.input_grad_stats.reset();
        c.weight_grad_stats.reset();
        split_backward(c, median(first_i), median(first_w));  // c.backward_ms == sb
      }
    } else {
      c.input_grad_ms.reset();
      c.weight_grad_ms.reset();
    }
    if (has_opt) {
      c.optimizer_ms = so;
      c.optimizer_stats = stats(no, nodes, &sched::StageCost::optimizer_stats, so);
    }
  }
  sched::validate(t, "transferred profile");
  return t;
}

}  // namespace pipewright::sim
