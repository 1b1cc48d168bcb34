// Directed-graph algorithms shared by Model and StageGraph (private to graph/; Boost.Graph stays
// in topology.cpp).
#pragma once

#include <utility>
#include <vector>

namespace pipewright::graph::detail {

struct Digraph {
  int vertices = 0;
  std::vector<std::pair<int, int>> edges;  // (from, to), each in [0, vertices)
};

// The vertices of one directed cycle in path order (v0 -> v1 -> ... -> v0), or empty if the
// graph is acyclic. Deterministic: the cycle through the lowest-numbered cyclic vertex.
std::vector<int> find_cycle(const Digraph& graph);

// Kahn's algorithm, lowest-numbered ready vertex first, so an already-sorted numbering is kept.
// Precondition: acyclic (returns fewer than `vertices` entries otherwise).
std::vector<int> ordered_topological_order(const Digraph& graph);

struct WeightedPath {
  std::vector<int> vertices;
  double length = 0.0;
};

// Longest path in a DAG where vertex v costs vertex_weight[v] and edge i costs edge_weight[i]
// (same order as graph.edges). Precondition: acyclic, weights >= 0.
WeightedPath longest_path(const Digraph& graph, const std::vector<double>& vertex_weight,
                          const std::vector<double>& edge_weight);

}  // namespace pipewright::graph::detail
