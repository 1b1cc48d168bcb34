// Megatron-Core pipeline layouts (layout.hpp).
#include "pipewright/graph/layout.hpp"

#include <algorithm>
#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::graph {
namespace {

constexpr std::string_view kLetters = "EtmL";
// Repetition counts beyond this are typos (a layout has at most a few hundred layers); the limit
// keeps "t*99999999999" from allocating.
constexpr std::size_t kMaxRepeat = 1 << 16;

bool is_layer(char c) { return kLetters.find(c) != std::string_view::npos; }

class LayoutParser {
 public:
  LayoutParser(std::string_view text, const std::string& source, std::size_t max_items)
      : text_(text), source_(source), max_items_(max_items) {}

  // Letters and `|` (as LayoutLayer with letter '|'), repetitions unrolled.
  std::vector<LayoutLayer> parse() {
    std::vector<LayoutLayer> out = items(false);
    return out;
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw ParseError(layout_error(text_, at, what, source_));
  }

  // "*N" at pos_ (pos_ at the '*'); returns N.
  std::size_t count() {
    const std::size_t star = pos_++;
    std::size_t n = 0;
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      n = n * 10 + static_cast<std::size_t>(text_[pos_] - '0');
      if (n > kMaxRepeat) fail(begin, "repetition count beyond " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    if (pos_ == begin) fail(star, "'*' must be followed by a count, as in t*3");
    return n;
  }

  // Accounts for `n` more copies of `len` items (at `at`), failing past max_items_ before the
  // caller allocates them.
  void grow(std::size_t len, std::size_t n, std::size_t at) {
    if (len != 0 && n > (max_items_ - std::min(produced_, max_items_)) / len) {
      fail(at, "the layout expands to more than " + std::to_string(max_items_) +
                   " layers and stage ends (the limit: the model's size, or " +
                   std::to_string(kMaxLayoutItems) + ")");
    }
    produced_ += len * n;
  }

  std::vector<LayoutLayer> items(bool in_group) {
    std::vector<LayoutLayer> out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ',') {  // cosmetic in Megatron
        ++pos_;
      } else if (c == ')') {
        if (!in_group) fail(pos_, "')' closes no group");
        return out;
      } else if (c == '(') {
        if (in_group) fail(pos_, "groups do not nest (Megatron unrolls one level of (...)*N)");
        const std::size_t open = pos_++;
        std::vector<LayoutLayer> body = items(true);
        if (pos_ >= text_.size()) fail(open, "'(' is never closed");
        ++pos_;  // ')'
        if (pos_ >= text_.size() || text_[pos_] != '*') {
          fail(pos_ - 1, "a group (...) must be followed by *N");
        }
        const std::size_t n = count();
        produced_ -= body.size();  // counted once while parsing the body; now n times
        grow(body.size(), n, open);
        for (std::size_t k = 0; k < n; ++k) out.insert(out.end(), body.begin(), body.end());
      } else if (is_layer(c) || c == '|') {
        const LayoutLayer layer{c, pos_++};
        std::size_t n = 1;
        if (pos_ < text_.size() && text_[pos_] == '*') n = count();
        grow(1, n, layer.position);
        out.insert(out.end(), n, layer);
      } else if (c == '*') {
        fail(pos_, "'*' repeats the letter or group before it, and there is none");
      } else {
        fail(pos_, std::string("'") + c +
                       "' is not a layer (E embedding, t decoder layer, m MTP layer, L loss; "
                       "| ends a stage)");
      }
    }
    return out;
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t max_items_;
  std::size_t produced_ = 0;  // items of the expansion so far
  std::size_t pos_ = 0;
};

}  // namespace

std::string layout_error(std::string_view layout, std::size_t position, const std::string& what,
                         const std::string& source) {
  return source + ": character " + std::to_string(position) + ": " + what + "\n  " +
         std::string(layout) + "\n  " + std::string(position, ' ') + "^";
}

MegatronLayout parse_megatron_layout(std::string_view text, const std::string& source,
                                     std::size_t max_items) {
  MegatronLayout out;
  out.text = std::string(text);
  PW_CHECK(!text.empty(), ParseError, source << ": empty layout");
  const std::vector<LayoutLayer> flat = LayoutParser(text, source, max_items).parse();
  out.stages.emplace_back();
  for (const LayoutLayer& l : flat) {
    if (l.letter == '|') {
      out.stages.back().end = l.position;
      out.stages.emplace_back();
    } else {
      out.stages.back().layers.push_back(l);
    }
  }
  out.stages.back().end = text.size();
  return out;
}

std::size_t layout_limit(const Model& model) noexcept {
  return std::min(kMaxLayoutItems, 2 * model.nodes.size() + 2);
}

Partition layout_partition(const Model& model, const MegatronLayout& layout, int pp,
                           const PartitionOptions& options, const std::string& source) {
  const auto fail = [&](std::size_t at, const std::string& what) {
    throw ParseError(layout_error(layout.text, at, what, source));
  };
  const auto stages = static_cast<int>(layout.stages.size());
  PW_CHECK(pp >= 1, ConfigError, "--pp must be >= 1, got " << pp);
  if (stages % pp != 0) {
    fail(layout.text.size(), "the layout has " + std::to_string(stages) + " stages, which --pp " +
                                 std::to_string(pp) +
                                 " does not divide (Megatron: virtual stages = stages / pp)");
  }
  // The model's layers, in order: (letter, the nodes it holds).
  std::vector<std::pair<char, std::vector<int>>> layers;
  const std::vector<int> order = model.topological_order();
  std::vector<int> before;  // nodes before the first block
  for (const int n : order) {
    const Node& node = model.nodes[static_cast<std::size_t>(n)];
    if (node.kind == NodeKind::kTransformerBlock) {
      const auto it = node.attrs.find("megatron_layer");
      layers.push_back({it != node.attrs.end() && it->second == "mtp" ? 'm' : 't', {n}});
    } else if (layers.empty()) {
      before.push_back(n);
    } else {
      layers.back().second.push_back(n);
    }
  }
  PW_CHECK(!layers.empty(), ConfigError,
           source << ": model '" << model.name
                  << "' has no transformer_block nodes, so no decoder layers for t");
  // Nodes after the last block are the loss and head (L); the embedding (E) is the ones before.
  std::vector<int> after(layers.back().second.begin() + 1, layers.back().second.end());
  layers.back().second.resize(1);
  PW_CHECK(!before.empty() && !after.empty(), ConfigError,
           source << ": model '" << model.name << "' needs nodes before its first "
                  << "transformer_block (the embedding, E) and after its last (the head, L)");
  layers.insert(layers.begin(), {'E', before});
  layers.push_back({'L', after});

  std::vector<LayoutLayer> flat;
  for (const LayoutStage& s : layout.stages) {
    if (s.layers.empty()) {
      fail(s.end, "stage " + std::to_string(&s - layout.stages.data()) +
                      " holds no layer (pipewright runs no empty stages)");
    }
    flat.insert(flat.end(), s.layers.begin(), s.layers.end());
  }
  if (flat.front().letter != 'E') fail(flat.front().position, "the first layer must be E");
  if (flat.back().letter != 'L') fail(flat.back().position, "the last layer must be L");
  const auto count_in = [](const auto& v, char c) {
    return std::count_if(v.begin(), v.end(), [c](const auto& x) { return x.first == c; });
  };
  for (const char c : {'E', 't', 'm', 'L'}) {
    const auto want = count_in(layers, c);
    const auto got = std::count_if(flat.begin(), flat.end(),
                                   [c](const LayoutLayer& l) { return l.letter == c; });
    if (got > want) {
      // Point at the first letter beyond the model's count.
      std::ptrdiff_t seen = 0;
      for (const LayoutLayer& l : flat) {
        if (l.letter == c && ++seen > want) {
          fail(l.position, std::string("one ") + c + " too many: model '" + model.name + "' has " +
                               std::to_string(want) + " " + c);
        }
      }
    }
    if (got < want) {
      fail(layout.text.size(), "the layout has " + std::to_string(got) + " " + c + ", model '" +
                                   model.name + "' has " + std::to_string(want));
    }
  }
  const auto last_t = std::find_if(flat.rbegin(), flat.rend(),
                                   [](const LayoutLayer& l) { return l.letter == 't'; });
  for (auto it = flat.begin(); it != flat.end() && last_t != flat.rend(); ++it) {
    if (it->letter == 'm' && &*it < &*last_t) {
      fail(it->position, "MTP layers (m) come after every decoder layer (t)");
    }
  }
  // Layer k of the layout holds layer k of the model (same letters in the same order now).
  std::vector<int> node_stage(model.nodes.size(), 0);
  std::size_t k = 0;
  for (int s = 0; s < stages; ++s) {
    for (std::size_t i = 0; i < layout.stages[static_cast<std::size_t>(s)].layers.size(); ++i) {
      for (const int n : layers[k++].second) node_stage[static_cast<std::size_t>(n)] = s;
    }
  }
  PartitionOptions opts = options;
  opts.stages = stages;
  return make_partition(model, node_stage, opts, "custom");
}

}  // namespace pipewright::graph
