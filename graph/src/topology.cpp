#include "topology.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dag_shortest_paths.hpp>
#include <boost/graph/strong_components.hpp>
#include <functional>
#include <limits>
#include <queue>

#include "pipewright/graph/error.hpp"

namespace pipewright::graph::detail {

namespace {

using BoostGraph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                          boost::property<boost::edge_weight_t, double>>;

BoostGraph to_boost(const Digraph& graph) {
  BoostGraph g(static_cast<std::size_t>(graph.vertices));
  for (const auto& [from, to] : graph.edges) boost::add_edge(from, to, g);
  return g;
}

}  // namespace

std::vector<int> find_cycle(const Digraph& graph) {
  // Self-loops are cycles that strong_components cannot show (a one-vertex component).
  int self_loop = -1;
  for (const auto& [from, to] : graph.edges) {
    if (from == to && (self_loop < 0 || from < self_loop)) self_loop = from;
  }
  const BoostGraph g = to_boost(graph);
  std::vector<int> component(static_cast<std::size_t>(graph.vertices));
  const int count = static_cast<int>(boost::strong_components(g, component.data()));
  std::vector<int> size(static_cast<std::size_t>(count), 0);
  for (int c : component) ++size[static_cast<std::size_t>(c)];
  int start = -1;
  for (int v = 0; v < graph.vertices; ++v) {
    if (size[static_cast<std::size_t>(component[static_cast<std::size_t>(v)])] > 1) {
      start = v;
      break;
    }
  }
  if (self_loop >= 0 && (start < 0 || self_loop < start)) return {self_loop};
  if (start < 0) return {};

  // Breadth-first search inside start's component for the shortest way back to start.
  std::vector<std::vector<int>> out(static_cast<std::size_t>(graph.vertices));
  for (const auto& [from, to] : graph.edges) out[static_cast<std::size_t>(from)].push_back(to);
  for (auto& list : out) std::sort(list.begin(), list.end());
  const int comp = component[static_cast<std::size_t>(start)];
  std::vector<int> parent(static_cast<std::size_t>(graph.vertices), -1);
  std::queue<int> frontier;
  frontier.push(start);
  int last = -1;
  while (!frontier.empty() && last < 0) {
    const int v = frontier.front();
    frontier.pop();
    for (int w : out[static_cast<std::size_t>(v)]) {
      if (component[static_cast<std::size_t>(w)] != comp) continue;
      if (w == start) {
        last = v;
        break;
      }
      if (parent[static_cast<std::size_t>(w)] < 0) {
        parent[static_cast<std::size_t>(w)] = v;
        frontier.push(w);
      }
    }
  }
  PW_ASSERT(last >= 0, "strongly connected component without a cycle");
  std::vector<int> cycle;
  for (int v = last; v != start; v = parent[static_cast<std::size_t>(v)]) cycle.push_back(v);
  cycle.push_back(start);
  std::reverse(cycle.begin(), cycle.end());
  return cycle;
}

std::vector<int> ordered_topological_order(const Digraph& graph) {
  // Note: boost::topological_sort is DFS-based and reorders independent branches; Kahn's
  // algorithm with a min-heap keeps the user's node order wherever the edges allow, which makes
  // partitions of hand-written models predictable.
  const auto n = static_cast<std::size_t>(graph.vertices);
  std::vector<std::vector<int>> out(n);
  std::vector<int> indegree(n, 0);
  for (const auto& [from, to] : graph.edges) {
    out[static_cast<std::size_t>(from)].push_back(to);
    ++indegree[static_cast<std::size_t>(to)];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (std::size_t v = 0; v < n; ++v) {
    if (indegree[v] == 0) ready.push(static_cast<int>(v));
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int w : out[static_cast<std::size_t>(v)]) {
      if (--indegree[static_cast<std::size_t>(w)] == 0) ready.push(w);
    }
  }
  return order;
}

WeightedPath longest_path(const Digraph& graph, const std::vector<double>& vertex_weight,
                          const std::vector<double>& edge_weight) {
  PW_ASSERT(vertex_weight.size() == static_cast<std::size_t>(graph.vertices), "weights");
  PW_ASSERT(edge_weight.size() == graph.edges.size(), "weights");
  if (graph.vertices == 0) return {};
  // Longest path = shortest path with negated weights, which dag_shortest_paths handles (it
  // relaxes in topological order, so negative weights are fine). A virtual source vertex feeds
  // every vertex; vertex weights move onto the edges into each vertex.
  const int source = graph.vertices;
  BoostGraph g(static_cast<std::size_t>(graph.vertices) + 1);
  auto weight = boost::get(boost::edge_weight, g);
  for (int v = 0; v < graph.vertices; ++v) {
    const auto e = boost::add_edge(source, v, g).first;
    weight[e] = -vertex_weight[static_cast<std::size_t>(v)];
  }
  for (std::size_t i = 0; i < graph.edges.size(); ++i) {
    const auto [from, to] = graph.edges[i];
    const auto e = boost::add_edge(from, to, g).first;
    weight[e] = -(edge_weight[i] + vertex_weight[static_cast<std::size_t>(to)]);
  }
  const std::size_t total = static_cast<std::size_t>(graph.vertices) + 1;
  std::vector<double> distance(total, std::numeric_limits<double>::max());
  std::vector<std::size_t> predecessor(total);
  boost::dag_shortest_paths(
      g, static_cast<std::size_t>(source),
      boost::distance_map(distance.data()).predecessor_map(predecessor.data()));
  int end = 0;
  for (int v = 1; v < graph.vertices; ++v) {
    if (distance[static_cast<std::size_t>(v)] < distance[static_cast<std::size_t>(end)]) end = v;
  }
  WeightedPath path;
  path.length = -distance[static_cast<std::size_t>(end)];
  for (std::size_t v = static_cast<std::size_t>(end); v != static_cast<std::size_t>(source);
       v = predecessor[v]) {
    path.vertices.push_back(static_cast<int>(v));
  }
  std::reverse(path.vertices.begin(), path.vertices.end());
  return path;
}

}  // namespace pipewright::graph::detail
