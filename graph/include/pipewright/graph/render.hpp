// Rendering of models and partitions as Graphviz graphs (docs/rendering.md).
//
// The node view draws the model DAG with one cluster per stage (`cluster_stage<N>`), filled with
// the colour of the stage's rank, and labels every edge that crosses a cut with the bytes it
// carries per microbatch. The stage view draws one box per stage and the cut values between
// stages. Every label is escaped. DOT text is always available; SVG/PNG are laid out in-process by
// libgvc when pipewright is built with PIPEWRIGHT_WITH_GRAPHVIZ.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"

namespace pipewright::graph {

struct RenderOptions {
  // Stage -> rank, for colouring (one colour per rank). Empty: stage s runs on rank s.
  std::vector<int> stage_to_rank;
  // Graphviz rankdir: "TB" (top to bottom) or "LR" (left to right: deep models read as a row).
  std::string rankdir = "TB";
  // Node view: fold each run of consecutive chained nodes with the same kind and costs (in one
  // stage) into one box "block0 .. block31, transformer_block x 32".
  bool collapse = false;
};

// The node view. `partition` may be null (no clusters); otherwise it must match `model`
// (check_partition_matches).
[[nodiscard]] std::string render_model_dot(const Model& model, const Partition* partition,
                                           const RenderOptions& options = {});
// The stage view of a partition.
[[nodiscard]] std::string render_stages_dot(const Model& model, const Partition& partition,
                                            const RenderOptions& options = {});

// Escapes `text` for a double-quoted DOT string (quotes, backslashes, newlines, control chars).
[[nodiscard]] std::string dot_escape(std::string_view text);
// "1.5 MiB"-style size for labels.
[[nodiscard]] std::string human_bytes(std::int64_t bytes);

enum class ImageFormat { kDot, kSvg, kPng };
// From a file name's extension (.dot, .gv, .svg, .png; case-insensitive), or nullopt.
[[nodiscard]] std::optional<ImageFormat> image_format_for_path(std::string_view path) noexcept;

// Graphs bigger than this are not laid out in-process (Graphviz's dot layout is super-linear);
// the DOT text is still available.
inline constexpr std::size_t kMaxLayoutNodes = 5000;

// True if this build can lay out and render SVG/PNG in-process.
[[nodiscard]] bool graphviz_available() noexcept;
// Lays out `dot` with Graphviz's dot engine and renders it (SVG text or PNG bytes). Throws
// ConfigError if this build has no Graphviz (the message says how to render the .dot instead),
// InputError if Graphviz rejects the graph or the graph is too big to lay out.
[[nodiscard]] std::string render_image(const std::string& dot, ImageFormat format);

}  // namespace pipewright::graph
