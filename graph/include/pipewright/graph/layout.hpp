// Megatron-Core pipeline layouts (`--pipeline-model-parallel-layout`, docs/interop.md): a string
// such as "Et*3|(tt|)*29,m|L" read as a partition of a model into stages.
//
// The grammar is Megatron's (PipelineParallelLayerLayout.parse_str_to_list): one letter per
// layer, E the embedding, t a decoder (transformer) layer, m a multi-token-prediction (MTP)
// layer, L the loss (the output head); `|` ends a stage; `x*N` repeats the letter (or `|`) x N
// times and `(...)*N` repeats a group (groups do not nest); `,` is cosmetic and ignored. The
// stages are Megatron's in order: stage i is virtual stage i / pp of pipeline rank i % pp
// (stage index = vp_stage * pp + pp_rank), so V = stages / pp, and pipewright's looping placement
// (stage s on rank s mod pp) puts every stage on the rank Megatron does.
//
// A model's layers for a layout (layout_partition): its transformer_block nodes in topological
// order are the decoder layers, t (those with attr "megatron_layer": "mtp" are MTP layers, m);
// the nodes before the first block are the embedding, E; the nodes after the last block the loss
// and head, L; any other node between blocks belongs to the block before it. As Megatron
// checks: E first and once, L last and once, as many t and m as the model has, m after every t;
// and pipewright needs every stage to hold a layer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"

namespace pipewright::graph {

// One layer of a parsed layout: its letter (E, t, m, L) and the index of the character of the
// original string it came from (a repeated letter: the letter's own character).
struct LayoutLayer {
  char letter = 't';
  std::size_t position = 0;
  friend bool operator==(const LayoutLayer& a, const LayoutLayer& b) noexcept {
    return a.letter == b.letter && a.position == b.position;
  }
};

struct LayoutStage {
  std::vector<LayoutLayer> layers;
  std::size_t end = 0;  // index of the `|` that ends the stage (the string's size for the last)
};

struct MegatronLayout {
  std::string text;  // as given
  std::vector<LayoutStage> stages;
};

// Parses `text`. Throws ParseError "<source>: character <i>: <what>" followed by the string and a
// caret under character i (0-based, as Python indexes strings) for a character that is not a
// layer, `*` without a count or a letter, an unclosed or nested group, and for a layout that
// expands to more than `max_items` letters and `|` (nested repeats multiply: "E(t*65536|)*65536L"
// would be 2^32), checked before anything is allocated. Callers that know the model pass its
// size (a layout holds each layer once, and every stage at least one layer).
inline constexpr std::size_t kMaxLayoutItems = std::size_t{1} << 16;
[[nodiscard]] MegatronLayout parse_megatron_layout(std::string_view text,
                                                   const std::string& source = "--layout",
                                                   std::size_t max_items = kMaxLayoutItems);
// The expansion limit for layouts of `model`: a layout holds each layer once and every stage at
// least one layer, so at most 2 x its nodes letters and '|' (capped at kMaxLayoutItems).
[[nodiscard]] std::size_t layout_limit(const Model& model) noexcept;

// The error message for character `position` of `layout`: "<source>: character <i>: <what>",
// then the string and a caret line.
[[nodiscard]] std::string layout_error(std::string_view layout, std::size_t position,
                                       const std::string& what,
                                       const std::string& source = "--layout");

// The partition of `model` the layout describes (method "layout"), one stage per layout stage in
// order. Throws ParseError pointing at the character (layout_error) when the layout does not fit
// the model (the checks above) or `pp` does not divide its stages (the caret after the end).
[[nodiscard]] Partition layout_partition(const Model& model, const MegatronLayout& layout, int pp,
                                         const PartitionOptions& options = {},
                                         const std::string& source = "--layout");

}  // namespace pipewright::graph
