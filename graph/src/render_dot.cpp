// DOT text for the node and stage views (docs/rendering.md).
#include <array>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/render.hpp"

namespace pipewright::graph {

namespace {

// Pastel fills (ColorBrewer Set3), one per rank, repeating after 12 ranks.
constexpr std::array<const char*, 12> kRankColours = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072",
                                                      "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
                                                      "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};

const char* colour_of_stage(int stage, const RenderOptions& options) {
  int rank = stage;
  if (!options.stage_to_rank.empty()) {
    PW_CHECK(stage >= 0 && static_cast<std::size_t>(stage) < options.stage_to_rank.size(),
             ConfigError, "no rank given for stage " << stage);
    rank = options.stage_to_rank[static_cast<std::size_t>(stage)];
  }
  return kRankColours[static_cast<std::size_t>(rank < 0 ? 0 : rank) % kRankColours.size()];
}

int rank_of_stage(int stage, const RenderOptions& options) {
  return options.stage_to_rank.empty() ? stage
                                       : options.stage_to_rank[static_cast<std::size_t>(stage)];
}

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A quoted DOT string from already-escaped pieces joined by "\n" (a DOT line break).
std::string quoted_lines(const std::vector<std::string>& lines) {
  std::string out = "\"";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\\n";
    out += dot_escape(lines[i]);
  }
  return out + "\"";
}

std::string value_text(const ScriptValue& v) {
  std::string shape;
  for (std::size_t i = 0; i < v.shape.size(); ++i) {
    shape += (i ? " x " : "") + std::to_string(v.shape[i]);
  }
  return v.dtype + " [" + shape + "]";
}

std::string node_label(const Node& node) {
  std::vector<std::string> lines{node.name, std::string(to_string(node.kind))};
  if (node.script) {
    // What a TorchScript node computes is opaque here; its signature says what flows.
    std::string outs;
    for (const ScriptValue& v : node.script->outputs) {
      outs += (outs.empty() ? "-> " : ", ") + value_text(v);
    }
    lines.push_back(std::to_string(node.script->inputs.size()) + " input(s) " + outs);
  }
  lines.push_back("fwd " + ms(node.cost.forward_ms) + " ms, bwd " + ms(node.cost.backward_ms) +
                  " ms");
  return quoted_lines(lines);
}

std::string input_label(const Model& model) {
  std::string shape = std::to_string(model.micro_batch_size);
  for (std::int64_t d : model.input.shape) shape += " x " + std::to_string(d);
  return quoted_lines({"input", model.input.dtype + " [" + shape + "]"});
}

void header(std::ostringstream& os, const std::string& title, const std::string& rankdir) {
  PW_CHECK(rankdir == "TB" || rankdir == "LR" || rankdir == "BT" || rankdir == "RL", ConfigError,
           "--rankdir must be TB, LR, BT or RL, got \"" << rankdir << "\"");
  os << "digraph " << quoted_lines({title}) << " {\n"
     << "  graph [rankdir=" << rankdir
     << ", fontname=\"Helvetica\", label=" << quoted_lines({title}) << ", labelloc=t];\n"
     << "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", "
        "fontsize=10];\n"
     << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
}

// Note [Collapsed runs]: for each node, the first node of its run: consecutive nodes (by index)
// v-1 -> v where v's only input edge comes from v-1, v-1's only output edge goes to v, both have
// the same kind and costs, and (with a partition) the same stage.
std::vector<int> collapsed_runs(const Model& model, const Partition* partition) {
  const std::size_t n = model.nodes.size();
  std::vector<int> in_count(n, 0), out_count(n, 0), only_in(n, -1);
  for (const ModelEdge& e : model.edges) {
    ++in_count[static_cast<std::size_t>(e.to)];
    ++out_count[static_cast<std::size_t>(e.from)];
    only_in[static_cast<std::size_t>(e.to)] = e.from;
  }
  const std::vector<bool> readers = model.model_input_readers();
  std::vector<int> rep(n);
  for (std::size_t v = 0; v < n; ++v) {
    rep[v] = static_cast<int>(v);
    if (v == 0) continue;
    const Node& a = model.nodes[v - 1];
    const Node& b = model.nodes[v];
    const bool chained = in_count[v] == 1 && only_in[v] == static_cast<int>(v) - 1 &&
                         out_count[v - 1] == 1 && !readers[v];
    const bool same =
        a.kind == b.kind && a.cost == b.cost && !a.script && !b.script &&
        (partition == nullptr || partition->node_stage[v - 1] == partition->node_stage[v]);
    if (chained && same) rep[v] = rep[v - 1];
  }
  return rep;
}

std::string stage_summary(const StageInfo& s) {
  return "fwd " + ms(s.forward_ms) + " ms, bwd " + ms(s.backward_ms) + " ms, mem " +
         human_bytes(s.memory_bytes);
}

}  // namespace

std::string dot_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
      case '\t':
        out += ' ';
        break;
      default:
        // Other control characters have no business in a label.
        out += std::iscntrl(static_cast<unsigned char>(c)) != 0 ? '?' : c;
    }
  }
  return out;
}

std::string human_bytes(std::int64_t bytes) {
  constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < kUnits.size()) {
    v /= 1024.0;
    ++unit;
  }
  char buf[48];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

std::string render_model_dot(const Model& model, const Partition* partition,
                             const RenderOptions& options) {
  std::ostringstream os;
  header(os, model.name.empty() ? std::string("model") : model.name, options.rankdir);
  os << "  input [shape=ellipse, label=" << input_label(model) << "];\n";
  const std::vector<int> rep =
      options.collapse ? collapsed_runs(model, partition) : std::vector<int>();
  auto rep_of = [&](int v) { return rep.empty() ? v : rep[static_cast<std::size_t>(v)]; };
  auto node_line = [&](int v, const char* indent) {
    if (rep_of(v) != v) return;  // folded into its run's first node
    const Node& n = model.nodes[static_cast<std::size_t>(v)];
    int last = v;
    while (last + 1 < static_cast<int>(model.nodes.size()) && rep_of(last + 1) == v) ++last;
    if (last == v) {
      os << indent << "n" << v << " [label=" << node_label(n) << "];\n";
      return;
    }
    const int count = last - v + 1;
    os << indent << "n" << v << " [label="
       << quoted_lines(
              {n.name + " .. " + model.nodes[static_cast<std::size_t>(last)].name,
               std::string(to_string(n.kind)) + " x " + std::to_string(count),
               "each: fwd " + ms(n.cost.forward_ms) + " ms, bwd " + ms(n.cost.backward_ms) + " ms"})
       << ", peripheries=2];\n";
  };
  if (partition == nullptr) {
    for (std::size_t v = 0; v < model.nodes.size(); ++v) node_line(static_cast<int>(v), "  ");
  } else {
    for (const StageInfo& s : partition->graph.stages) {
      os << "  subgraph cluster_stage" << s.index << " {\n"
         << "    label="
         << quoted_lines({"stage " + std::to_string(s.index) + " (rank " +
                              std::to_string(rank_of_stage(s.index, options)) + ")",
                          stage_summary(s)})
         << ";\n"
         << "    style=\"filled,rounded\"; color=\"#555555\"; fillcolor=\""
         << colour_of_stage(s.index, options) << "\";\n";
      for (int v : s.nodes) node_line(v, "    ");
      os << "  }\n";
    }
  }
  auto stage_of = [&](int v) {
    return partition == nullptr ? 0 : partition->node_stage[static_cast<std::size_t>(v)];
  };
  const std::vector<bool> readers = model.model_input_readers();
  for (std::size_t v = 0; v < model.nodes.size(); ++v) {
    if (!readers[v] || rep_of(static_cast<int>(v)) != static_cast<int>(v)) continue;
    os << "  input -> n" << v;
    if (partition != nullptr) {
      os << " [label=" << quoted_lines({human_bytes(model.input_bytes())})
         << ", color=\"#c0392b\", fontcolor=\"#c0392b\", penwidth=2]";
    }
    os << ";\n";
  }
  for (const ModelEdge& e : model.edges) {
    if (rep_of(e.from) == rep_of(e.to)) continue;  // inside a folded run
    os << "  n" << rep_of(e.from) << " -> n" << rep_of(e.to);
    std::vector<std::string> label;
    if (e.from_output != 0 || e.to_input != 0) {
      label.push_back("out " + std::to_string(e.from_output) + " -> in " +
                      std::to_string(e.to_input));
    }
    const bool cut = partition != nullptr && stage_of(e.from) != stage_of(e.to);
    if (cut) {
      label.push_back(human_bytes(model.nodes[static_cast<std::size_t>(e.from)].cost.output_bytes));
    }
    if (!label.empty() || cut) {
      os << " [";
      if (!label.empty()) os << "label=" << quoted_lines(label);
      if (cut)
        os << (label.empty() ? "" : ", ") << "color=\"#c0392b\", fontcolor=\"#c0392b\", penwidth=2";
      os << "]";
    }
    os << ";\n";
  }
  os << "}\n";
  return os.str();
}

std::string render_stages_dot(const Model& model, const Partition& partition,
                              const RenderOptions& options) {
  std::ostringstream os;
  header(os,
         (model.name.empty() ? std::string("model") : model.name) + " (" + partition.method + ", " +
             std::to_string(partition.num_stages()) + " stages)",
         options.rankdir);
  os << "  input [shape=ellipse, label=" << input_label(model) << "];\n";
  for (const StageInfo& s : partition.graph.stages) {
    const std::string first = model.nodes[static_cast<std::size_t>(s.nodes.front())].name;
    const std::string last = model.nodes[static_cast<std::size_t>(s.nodes.back())].name;
    os << "  subgraph cluster_stage" << s.index << " {\n"
       << "    label=" << quoted_lines({"rank " + std::to_string(rank_of_stage(s.index, options))})
       << "; style=\"filled,rounded\"; color=\"#555555\"; fillcolor=\""
       << colour_of_stage(s.index, options) << "\";\n"
       << "    s" << s.index << " [label="
       << quoted_lines({"stage " + std::to_string(s.index),
                        std::to_string(s.nodes.size()) + " nodes: " + first +
                            (s.nodes.size() > 1 ? " .. " + last : std::string()),
                        stage_summary(s)})
       << "];\n  }\n";
  }
  // One edge per (producer, consumer) stage pair, listing the values it carries.
  std::map<std::pair<int, int>, std::vector<const CutValue*>> pairs;
  for (const CutValue& c : partition.graph.edges) {
    pairs[{c.producer_stage, c.consumer_stage}].push_back(&c);
  }
  for (const auto& [key, cuts] : pairs) {
    std::vector<std::string> label;
    std::int64_t total = 0;
    for (const CutValue* c : cuts) {
      const std::string value = c->producer_node < 0
                                    ? std::string("input")
                                    : model.nodes[static_cast<std::size_t>(c->producer_node)].name;
      label.push_back(value + " (out " + std::to_string(c->producer_output) + " -> in " +
                      std::to_string(c->consumer_input) + ")");
      total += c->bytes;
    }
    label.push_back(human_bytes(total));
    os << "  " << (key.first < 0 ? std::string("input") : "s" + std::to_string(key.first))
       << " -> s" << key.second << " [label=" << quoted_lines(label) << "];\n";
  }
  os << "}\n";
  return os.str();
}

std::optional<ImageFormat> image_format_for_path(std::string_view path) noexcept {
  const auto dot = path.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  std::string ext;
  for (char c : path.substr(dot + 1)) {
    ext += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (ext == "dot" || ext == "gv") return ImageFormat::kDot;
  if (ext == "svg") return ImageFormat::kSvg;
  if (ext == "png") return ImageFormat::kPng;
  return std::nullopt;
}

}  // namespace pipewright::graph
