// Helpers shared by the graph tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "pipewright/graph/model.hpp"

namespace pipewright::graph::testing {

// A chain model of opaque nodes n0..n{k-1} with the given per-node forward+backward split 1:2.
inline Model chain_model(const std::vector<double>& ms,
                         const std::vector<std::int64_t>& params = {},
                         const std::vector<std::int64_t>& acts = {}) {
  Model m;
  m.name = "chain";
  m.input = ModelInput{"float32", {4}};
  for (std::size_t i = 0; i < ms.size(); ++i) {
    Node n;
    n.name = "n" + std::to_string(i);
    n.kind = NodeKind::kOpaque;
    n.cost.forward_ms = ms[i] / 3.0;
    n.cost.backward_ms = ms[i] - n.cost.forward_ms;
    n.cost.param_bytes = params.empty() ? 0 : params[i];
    n.cost.activation_bytes = acts.empty() ? 0 : acts[i];
    n.cost.output_bytes = 100 + static_cast<std::int64_t>(i);
    m.nodes.push_back(n);
    if (i > 0) m.edges.push_back(ModelEdge{static_cast<int>(i) - 1, 0, static_cast<int>(i), 0});
  }
  return m;
}

// Runs `fn`, expects it to throw E, and returns the message.
template <typename E>
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

}  // namespace pipewright::graph::testing
