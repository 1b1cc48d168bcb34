#include "pipewright/sim/cluster.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"

namespace pipewright::sim {
namespace {

using json::At;
using json::Json;

constexpr std::string_view kClusterFormat = "pipewright-cluster";
constexpr int kClusterVersion = 1;

// Nanoseconds to move `bytes` at `gb_per_s` (1e9 bytes/s), rounded to nearest.
std::int64_t transfer_ns(double bytes, double gb_per_s) noexcept {
  if (gb_per_s <= 0 || bytes <= 0) return 0;
  return std::llround(bytes / gb_per_s);  // bytes / (gb_per_s * 1e9) s = bytes / gb_per_s ns
}

Link read_link(const At& o) {
  o.only_keys({"latency_ms", "bandwidth_gb_per_s"});
  Link l;
  if (o.has_value("latency_ms")) l.latency_ms = o["latency_ms"].as_finite_nonnegative();
  if (o.has_value("bandwidth_gb_per_s")) {
    l.bandwidth_gb_per_s = o["bandwidth_gb_per_s"].as_finite_nonnegative();
  }
  return l;
}

// The keys of "sharded_collective_links", one per (collective, buffer).
struct ShardedKey {
  const char* name;
  ShardedCollective what;
  CollectiveBuffer buffer;
};
constexpr ShardedKey kShardedKeys[] = {
    {"reduce_scatter", ShardedCollective::kReduceScatter, CollectiveBuffer::kRegistered},
    {"all_gather", ShardedCollective::kAllGather, CollectiveBuffer::kRegistered},
    {"reduce_scatter_unregistered", ShardedCollective::kReduceScatter, CollectiveBuffer::kPrivate},
    {"all_gather_unregistered", ShardedCollective::kAllGather, CollectiveBuffer::kPrivate},
};

CollectiveLinks read_collective_links(const At& o) {
  o.only_keys({"intra_node", "inter_node"});
  CollectiveLinks l;
  if (o.has_value("intra_node")) l.intra_node = read_link(o["intra_node"]);
  if (o.has_value("inter_node")) l.inter_node = read_link(o["inter_node"]);
  return l;
}

}  // namespace

const CollectiveLinks& ShardedCollectiveLinks::of(ShardedCollective what,
                                                  CollectiveBuffer buffer) const noexcept {
  const bool rs = what == ShardedCollective::kReduceScatter;
  if (buffer == CollectiveBuffer::kRegistered) return rs ? reduce_scatter : all_gather;
  return rs ? reduce_scatter_unregistered : all_gather_unregistered;
}

CollectiveLinks& ShardedCollectiveLinks::of(ShardedCollective what,
                                            CollectiveBuffer buffer) noexcept {
  return const_cast<CollectiveLinks&>(std::as_const(*this).of(what, buffer));
}

bool ShardedCollectiveLinks::empty() const noexcept {
  return reduce_scatter.empty() && all_gather.empty() && reduce_scatter_unregistered.empty() &&
         all_gather_unregistered.empty();
}

const Link& Cluster::sharded_link(ShardedCollective what, CollectiveBuffer buffer,
                                  bool spans_nodes) const noexcept {
  const CollectiveLinks& l = sharded_links.of(what, buffer);
  const std::optional<Link>& given = spans_nodes ? l.inter_node : l.intra_node;
  return given ? *given : collective_link(spans_nodes);
}

const Link& Cluster::collective_link(bool spans_nodes) const noexcept {
  if (spans_nodes) return collective_inter_node ? *collective_inter_node : inter_node;
  return collective_intra_node ? *collective_intra_node : intra_node;
}

std::int64_t ms_to_ns(double ms) noexcept { return std::llround(ms * 1e6); }

std::int64_t p2p_ns(const Link& link, std::int64_t bytes) noexcept {
  return ms_to_ns(link.latency_ms) +
         transfer_ns(static_cast<double>(bytes), link.bandwidth_gb_per_s);
}

std::int64_t reduce_ns(const Link& link, std::int32_t n, std::int64_t bytes) noexcept {
  if (n <= 1) return 0;
  const double frac = static_cast<double>(n - 1) / n;
  return (n - 1) * ms_to_ns(link.latency_ms) +
         transfer_ns(frac * static_cast<double>(bytes), link.bandwidth_gb_per_s);
}

std::int64_t allreduce_ns(CollectiveAlgorithm algo, const Link& link, std::int32_t n,
                          std::int64_t bytes) noexcept {
  if (n <= 1) return 0;
  if (algo == CollectiveAlgorithm::kTree) {
    const auto depth = static_cast<std::int64_t>(std::ceil(std::log2(static_cast<double>(n))));
    return 2 * depth * ms_to_ns(link.latency_ms) +
           transfer_ns(2.0 * static_cast<double>(bytes), link.bandwidth_gb_per_s);
  }
  const double frac = 2.0 * static_cast<double>(n - 1) / n;
  return 2 * static_cast<std::int64_t>(n - 1) * ms_to_ns(link.latency_ms) +
         transfer_ns(frac * static_cast<double>(bytes), link.bandwidth_gb_per_s);
}

std::int32_t Cluster::node_of(std::int32_t g) const noexcept {
  if (!rank_nodes.empty()) return rank_nodes[static_cast<std::size_t>(g)];
  if (ranks_per_node <= 0) return 0;
  return g / ranks_per_node;
}

std::int32_t Cluster::global_rank(std::int32_t r, std::int32_t j, std::int32_t pp,
                                  std::int32_t dp) const noexcept {
  return placement == Placement::kPipelineMajor ? r * dp + j : j * pp + r;
}

const Link& Cluster::link(std::int32_t a, std::int32_t b) const noexcept {
  return node_of(a) == node_of(b) ? intra_node : inter_node;
}

void Cluster::check_fits(std::int32_t world, std::string_view origin) const {
  if (!rank_nodes.empty()) {
    PW_CHECK(static_cast<std::int32_t>(rank_nodes.size()) == world, ConfigError,
             origin << ": /rank_nodes places " << rank_nodes.size() << " ranks but the run has "
                    << world << " (pipeline ranks x data-parallel replicas)");
    return;
  }
  if (ranks_per_node <= 0) return;
  PW_CHECK(static_cast<std::int64_t>(nodes) * ranks_per_node >= world, ConfigError,
           origin << ": /nodes x /ranks_per_node = " << nodes << " x " << ranks_per_node
                  << " devices cannot host " << world
                  << " ranks (pipeline ranks x data-parallel replicas)");
}

Cluster parse_cluster(std::string_view text, std::string_view origin) {
  const json::Document doc = json::parse_strict(text, std::string(origin));
  const At root{doc.root, doc.source, ""};
  root.only_keys({"format", "version", "name", "nodes", "ranks_per_node", "cores_per_node",
                  "links_per_node", "device_memory_bytes", "intra_node", "inter_node",
                  "send_cpu_load", "collective", "placement", "rank_nodes", "description",
                  "collective_links", "sharded_collective_links", "calibration", "device"});
  constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();
  const std::string format = root["format"].as_string();
  if (format != kClusterFormat) {
    root["format"].fail("must be \"" + std::string(kClusterFormat) + "\", got \"" + format + "\"");
  }
  const auto version = root["version"].as_int(0, kMaxInt32);
  if (version != kClusterVersion) {
    root["version"].fail("version " + std::to_string(version) + " is not supported (expected " +
                         std::to_string(kClusterVersion) + ")");
  }
  Cluster c;
  if (root.has_value("name")) c.name = root["name"].as_string();
  if (root.has_value("nodes"))
    c.nodes = static_cast<std::int32_t>(root["nodes"].as_int(1, kMaxInt32));
  if (root.has_value("ranks_per_node")) {
    c.ranks_per_node = static_cast<std::int32_t>(root["ranks_per_node"].as_int(1, kMaxInt32));
  }
  if (root.has_value("device_memory_bytes")) {
    c.device_memory_bytes =
        root["device_memory_bytes"].as_int(0, std::numeric_limits<std::int64_t>::max());
  }
  if (root.has_value("cores_per_node")) {
    c.cores_per_node = static_cast<std::int32_t>(root["cores_per_node"].as_int(0, 1 << 20));
  }
  if (root.has_value("links_per_node")) {
    c.links_per_node = static_cast<std::int32_t>(root["links_per_node"].as_int(0, 1 << 20));
  }
  if (root.has_value("intra_node")) c.intra_node = read_link(root["intra_node"]);
  c.inter_node = root.has_value("inter_node") ? read_link(root["inter_node"]) : c.intra_node;
  if (root.has_value("send_cpu_load"))
    c.send_cpu_load = root["send_cpu_load"].as_finite_nonnegative();
  if (root.has_value("collective_links")) {
    const At cl = root["collective_links"];
    cl.only_keys({"intra_node", "inter_node"});
    if (cl.has_value("intra_node")) c.collective_intra_node = read_link(cl["intra_node"]);
    if (cl.has_value("inter_node")) c.collective_inter_node = read_link(cl["inter_node"]);
  }
  if (root.has_value("sharded_collective_links")) {
    const At sl = root["sharded_collective_links"];
    sl.only_keys(
        {kShardedKeys[0].name, kShardedKeys[1].name, kShardedKeys[2].name, kShardedKeys[3].name});
    for (const auto& k : kShardedKeys) {
      if (sl.has_value(k.name))
        c.sharded_links.of(k.what, k.buffer) = read_collective_links(sl[k.name]);
    }
  }
  if (root.has_value("device")) {
    const At d = root["device"];
    d.only_keys({"name", "peak_tflops", "hbm_gb_per_s", "achieved_gemm_fraction", "source"});
    Device dev;
    if (d.has_value("name")) dev.name = d["name"].as_string();
    dev.peak_tflops = d["peak_tflops"].as_finite_nonnegative();
    if (d.has_value("hbm_gb_per_s")) dev.hbm_gb_per_s = d["hbm_gb_per_s"].as_finite_nonnegative();
    if (d.has_value("achieved_gemm_fraction")) {
      dev.achieved_gemm_fraction = d["achieved_gemm_fraction"].as_finite_nonnegative();
      if (dev.achieved_gemm_fraction <= 0 || dev.achieved_gemm_fraction > 1)
        d["achieved_gemm_fraction"].fail("must be in (0, 1], got " +
                                         std::to_string(dev.achieved_gemm_fraction));
    }
    if (d.has_value("source")) dev.source = d["source"].as_string();
    c.device = std::move(dev);
  }
  if (root.has_value("calibration")) c.calibration_json = root["calibration"].value.dump();
  if (root.has_value("collective")) {
    const std::string a = root["collective"].as_string();
    if (a != "ring" && a != "tree") {
      root["collective"].fail("must be \"ring\" or \"tree\", got \"" + a + "\"");
    }
    c.collective = a == "ring" ? CollectiveAlgorithm::kRing : CollectiveAlgorithm::kTree;
  }
  if (root.has_value("placement")) {
    const std::string p = root["placement"].as_string();
    if (p != "pipeline-major" && p != "replica-major") {
      root["placement"].fail("must be \"pipeline-major\" or \"replica-major\", got \"" + p + "\"");
    }
    c.placement = p == "pipeline-major" ? Placement::kPipelineMajor : Placement::kReplicaMajor;
  }
  if (root.has_value("rank_nodes")) {
    const At rn = root["rank_nodes"];
    rn.expect_array();
    const std::size_t n = rn.value.size();
    c.rank_nodes.assign(n, -1);
    for (std::size_t i = 0; i < n; ++i) {
      const At e = rn[i];
      e.only_keys({"rank", "node"});
      const auto rank = e["rank"].as_int(0, kMaxInt32);
      const auto node = e["node"].as_int(0, kMaxInt32);
      if (rank >= static_cast<std::int64_t>(n)) {
        e["rank"].fail("names unknown rank " + std::to_string(rank) + " (the " + std::to_string(n) +
                       " entries must cover ranks 0.." + std::to_string(n - 1) + ")");
      }
      if (c.rank_nodes[static_cast<std::size_t>(rank)] >= 0) {
        e["rank"].fail("places rank " + std::to_string(rank) + " twice");
      }
      if (node >= c.nodes) {
        e["node"].fail("names unknown node " + std::to_string(node) + " (/nodes is " +
                       std::to_string(c.nodes) + ")");
      }
      c.rank_nodes[static_cast<std::size_t>(rank)] = static_cast<std::int32_t>(node);
    }
  }
  return c;
}

Cluster load_cluster(const std::string& path) {
  return parse_cluster(json::read_text_file(path, "cluster file", json::Limits{}.max_bytes), path);
}

std::string to_json(const Cluster& c) {
  auto link = [](const Link& l) {
    return Json{{"latency_ms", l.latency_ms}, {"bandwidth_gb_per_s", l.bandwidth_gb_per_s}};
  };
  Json j{
      {"format", std::string(kClusterFormat)},
      {"version", kClusterVersion},
      {"name", c.name},
      {"nodes", c.nodes},
      {"device_memory_bytes", c.device_memory_bytes},
      {"intra_node", link(c.intra_node)},
      {"inter_node", link(c.inter_node)},
      {"collective", c.collective == CollectiveAlgorithm::kRing ? "ring" : "tree"},
      {"placement", c.placement == Placement::kPipelineMajor ? "pipeline-major" : "replica-major"}};
  if (c.ranks_per_node > 0) j["ranks_per_node"] = c.ranks_per_node;  // absent: one node, any count
  if (c.cores_per_node > 0) j["cores_per_node"] = c.cores_per_node;  // absent: own devices
  if (c.links_per_node > 0) j["links_per_node"] = c.links_per_node;  // absent: own links
  if (c.send_cpu_load > 0) j["send_cpu_load"] = c.send_cpu_load;     // absent: none
  if (c.collective_intra_node || c.collective_inter_node) {
    Json cl = Json::object();
    if (c.collective_intra_node) cl["intra_node"] = link(*c.collective_intra_node);
    if (c.collective_inter_node) cl["inter_node"] = link(*c.collective_inter_node);
    j["collective_links"] = cl;
  }
  if (!c.sharded_links.empty()) {
    Json sl = Json::object();
    for (const auto& k : kShardedKeys) {
      const CollectiveLinks& l = c.sharded_links.of(k.what, k.buffer);
      if (l.empty()) continue;
      Json o = Json::object();
      if (l.intra_node) o["intra_node"] = link(*l.intra_node);
      if (l.inter_node) o["inter_node"] = link(*l.inter_node);
      sl[k.name] = o;
    }
    j["sharded_collective_links"] = sl;
  }
  if (c.device) {
    j["device"] = Json{{"name", c.device->name},
                       {"peak_tflops", c.device->peak_tflops},
                       {"hbm_gb_per_s", c.device->hbm_gb_per_s},
                       {"achieved_gemm_fraction", c.device->achieved_gemm_fraction},
                       {"source", c.device->source}};
  }
  if (!c.calibration_json.empty()) j["calibration"] = Json::parse(c.calibration_json);
  if (!c.rank_nodes.empty()) {
    Json rn = Json::array();
    for (std::size_t r = 0; r < c.rank_nodes.size(); ++r)
      rn.push_back({{"rank", r}, {"node", c.rank_nodes[r]}});
    j["rank_nodes"] = rn;
  }
  return j.dump(2) + "\n";
}

}  // namespace pipewright::sim
