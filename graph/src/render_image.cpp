// In-process SVG/PNG rendering with libgvc (only when built with PIPEWRIGHT_WITH_GRAPHVIZ).
#include <mutex>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/render.hpp"

#if defined(PIPEWRIGHT_WITH_GRAPHVIZ)
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#endif

#if defined(PIPEWRIGHT_WITH_GRAPHVIZ)
// Graphviz's pango plugin initialises fontconfig, whose caches live until exit, and Graphviz
// 2.42's layout of clusters leaks a few allocations that agclose/gvFreeLayout do not free.
// LeakSanitizer reports both in sanitizer builds (PRESET=asan); they are not pipewright's leaks
// (the only Graphviz memory pipewright owns, the rendered data, is freed), so suppress them.
// Weak, so a program that defines its own suppression list keeps it.
extern "C" __attribute__((weak)) const char* __lsan_default_suppressions() {
  return "leak:libfontconfig.so\nleak:libgvc.so\nleak:libcgraph.so\n";
}
#endif

namespace pipewright::graph {

namespace {

const char* format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kSvg:
      return "svg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kDot:
      return "dot";
  }
  return "dot";
}

#if defined(PIPEWRIGHT_WITH_GRAPHVIZ)
std::size_t count_node_lines(const std::string& dot) {
  // Each node/stage statement in our DOT ends its line with "];" and carries "label=";
  // counting " [label=" is a cheap upper bound on what the layout has to place.
  std::size_t count = 0;
  for (std::size_t at = dot.find("[label="); at != std::string::npos;
       at = dot.find("[label=", at + 1)) {
    ++count;
  }
  return count;
}

// Graphviz reports errors through a global callback; collect them instead of printing (library
// code never prints). The mutex serialises renders, since the callback and libgvc's global state
// are process-wide.
std::mutex g_graphviz_mutex;
std::string g_graphviz_errors;

int collect_error(char* message) {
  g_graphviz_errors += message;
  return 0;
}

// One Graphviz context for the whole process, created on first use and never freed: Graphviz
// 2.42's text-size cache keeps pointers into a context's font data, so freeing a context and
// creating another one reads freed memory on the next layout (found by ASan in
// Render.ImagesNeedGraphviz). Call with g_graphviz_mutex held.
GVC_t* graphviz_context() {
  static GVC_t* const context = gvContext();
  return context;
}
#endif

}  // namespace

bool graphviz_available() noexcept {
#if defined(PIPEWRIGHT_WITH_GRAPHVIZ)
  return true;
#else
  return false;
#endif
}

std::string render_image(const std::string& dot, ImageFormat format) {
  if (format == ImageFormat::kDot) return dot;
  const char* name = format_name(format);
#if !defined(PIPEWRIGHT_WITH_GRAPHVIZ)
  throw ConfigError(
      std::string("this pipewright was built without Graphviz, so it cannot write .") + name +
      " files; write a .dot file and run `dot -T" + name + " graph.dot -o graph." + name +
      "`, or rebuild with -DPIPEWRIGHT_WITH_GRAPHVIZ=ON (needs libgraphviz-dev)");
#else
  const std::size_t nodes = count_node_lines(dot);
  PW_CHECK(nodes <= kMaxLayoutNodes, ConfigError,
           "the graph has about " << nodes << " nodes, more than the " << kMaxLayoutNodes
                                  << " pipewright lays out in-process; use --stages-only, or write "
                                     ".dot and run `dot -T"
                                  << name << "` yourself");
  std::lock_guard<std::mutex> lock(g_graphviz_mutex);
  g_graphviz_errors.clear();
  const agusererrf previous = agseterrf(&collect_error);
  GVC_t* gvc = graphviz_context();
  Agraph_t* graph = gvc != nullptr ? agmemread(dot.c_str()) : nullptr;
  std::string out;
  std::string failure;
  if (gvc == nullptr) {
    failure = "cannot create a Graphviz context";
  } else if (graph == nullptr) {
    failure = "Graphviz cannot parse the graph: " + g_graphviz_errors;
  } else if ((format == ImageFormat::kPng &&
              agsafeset(graph, const_cast<char*>("dpi"), const_cast<char*>("144"),
                        const_cast<char*>("")) != 0) ||
             gvLayout(gvc, graph, "dot") != 0) {
    failure = "Graphviz layout failed: " + g_graphviz_errors;
  } else {
    char* data = nullptr;
    unsigned int length = 0;
    if (gvRenderData(gvc, graph, name, &data, &length) != 0 || data == nullptr) {
      failure = std::string("Graphviz cannot render ") + name +
                " (is its plugin installed?): " + g_graphviz_errors;
    } else {
      out.assign(data, length);
    }
    if (data != nullptr) gvFreeRenderData(data);
    gvFreeLayout(gvc, graph);
  }
  if (graph != nullptr) agclose(graph);
  agseterrf(previous);
  PW_CHECK(failure.empty(), InputError, failure);
  return out;
#endif
}

}  // namespace pipewright::graph
