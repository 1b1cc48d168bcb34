#include "pipewright/sim/cluster.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "json_read.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::sim {
namespace {

using detail::JsonObject;
using nlohmann::json;

constexpr std::string_view kClusterFormat = "pipewright-cluster";
constexpr int kClusterVersion = 1;

// Nanoseconds to move `bytes` at `gb_per_s` (1e9 bytes/s), rounded to nearest.
std::int64_t transfer_ns(double bytes, double gb_per_s) noexcept {
  if (gb_per_s <= 0 || bytes <= 0) return 0;
  return std::llround(bytes / gb_per_s);  // bytes / (gb_per_s * 1e9) s = bytes / gb_per_s ns
}

Link read_link(const JsonObject& root, std::string_view key) {
  JsonObject o(root.origin(), root.field(key), root.at(key));
  o.check_known({"latency_ms", "bandwidth_gb_per_s"});
  Link l;
  if (o.has("latency_ms")) l.latency_ms = o.number("latency_ms");
  if (o.has("bandwidth_gb_per_s")) l.bandwidth_gb_per_s = o.number("bandwidth_gb_per_s");
  return l;
}

}  // namespace

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
  const json j = detail::parse_json_text(text, origin);
  JsonObject root(origin, "", j);
  root.check_known({"format", "version", "name", "nodes", "ranks_per_node", "cores_per_node",
                    "device_memory_bytes", "intra_node", "inter_node", "collective", "placement",
                    "rank_nodes", "description", "collective_links", "calibration"});
  const std::string format = root.string("format");
  PW_CHECK(format == kClusterFormat, ParseError,
           origin << ": /format must be \"" << kClusterFormat << "\", got \"" << format << "\"");
  const auto version = root.integer("version");
  PW_CHECK(version == kClusterVersion, ParseError,
           origin << ": /version " << version << " is not supported (expected " << kClusterVersion
                  << ")");
  Cluster c;
  if (root.has("name")) c.name = root.string("name");
  if (root.has("nodes")) c.nodes = static_cast<std::int32_t>(root.integer("nodes", 1));
  if (root.has("ranks_per_node"))
    c.ranks_per_node = static_cast<std::int32_t>(root.integer("ranks_per_node", 1));
  if (root.has("device_memory_bytes")) c.device_memory_bytes = root.integer("device_memory_bytes");
  if (root.has("cores_per_node")) {
    const std::int64_t cores = root.integer("cores_per_node", 0);
    PW_CHECK(
        cores <= (1 << 20), ParseError,
        origin << ": " << root.field("cores_per_node") << " must be <= 1048576, got " << cores);
    c.cores_per_node = static_cast<std::int32_t>(cores);
  }
  if (root.has("intra_node")) c.intra_node = read_link(root, "intra_node");
  c.inter_node = root.has("inter_node") ? read_link(root, "inter_node") : c.intra_node;
  if (root.has("collective_links")) {
    JsonObject cl(origin, "/collective_links", root.at("collective_links"));
    cl.check_known({"intra_node", "inter_node"});
    if (cl.has("intra_node")) c.collective_intra_node = read_link(cl, "intra_node");
    if (cl.has("inter_node")) c.collective_inter_node = read_link(cl, "inter_node");
  }
  if (root.has("calibration")) c.calibration_json = root.at("calibration").dump();
  if (root.has("collective")) {
    const std::string a = root.string("collective");
    PW_CHECK(a == "ring" || a == "tree", ParseError,
             origin << ": /collective must be \"ring\" or \"tree\", got \"" << a << "\"");
    c.collective = a == "ring" ? CollectiveAlgorithm::kRing : CollectiveAlgorithm::kTree;
  }
  if (root.has("placement")) {
    const std::string p = root.string("placement");
    PW_CHECK(p == "pipeline-major" || p == "replica-major", ParseError,
             origin << ": /placement must be \"pipeline-major\" or \"replica-major\", got \"" << p
                    << "\"");
    c.placement = p == "pipeline-major" ? Placement::kPipelineMajor : Placement::kReplicaMajor;
  }
  if (root.has("rank_nodes")) {
    const json& rn = root.at("rank_nodes");
    PW_CHECK(rn.is_array(), ParseError, origin << ": /rank_nodes must be an array");
    c.rank_nodes.assign(rn.size(), -1);
    for (std::size_t i = 0; i < rn.size(); ++i) {
      JsonObject e(origin, "/rank_nodes/" + std::to_string(i), rn[i]);
      e.check_known({"rank", "node"});
      const auto rank = e.integer("rank");
      const auto node = e.integer("node");
      PW_CHECK(rank < static_cast<std::int64_t>(rn.size()), ParseError,
               origin << ": " << e.field("rank") << " names unknown rank " << rank << " (the "
                      << rn.size() << " entries must cover ranks 0.." << rn.size() - 1 << ")");
      PW_CHECK(c.rank_nodes[static_cast<std::size_t>(rank)] < 0, ParseError,
               origin << ": " << e.field("rank") << " places rank " << rank << " twice");
      PW_CHECK(node < c.nodes, ParseError,
               origin << ": " << e.field("node") << " names unknown node " << node << " (/nodes is "
                      << c.nodes << ")");
      c.rank_nodes[static_cast<std::size_t>(rank)] = static_cast<std::int32_t>(node);
    }
  }
  return c;
}

Cluster load_cluster(const std::string& path) {
  return parse_cluster(detail::read_text_file(path, "cluster"), path);
}

std::string to_json(const Cluster& c) {
  auto link = [](const Link& l) {
    return json{{"latency_ms", l.latency_ms}, {"bandwidth_gb_per_s", l.bandwidth_gb_per_s}};
  };
  json j{
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
  if (c.collective_intra_node || c.collective_inter_node) {
    json cl = json::object();
    if (c.collective_intra_node) cl["intra_node"] = link(*c.collective_intra_node);
    if (c.collective_inter_node) cl["inter_node"] = link(*c.collective_inter_node);
    j["collective_links"] = cl;
  }
  if (!c.calibration_json.empty()) j["calibration"] = json::parse(c.calibration_json);
  if (!c.rank_nodes.empty()) {
    json rn = json::array();
    for (std::size_t r = 0; r < c.rank_nodes.size(); ++r)
      rn.push_back({{"rank", r}, {"node", c.rank_nodes[r]}});
    j["rank_nodes"] = rn;
  }
  return j.dump(2) + "\n";
}

}  // namespace pipewright::sim
