// Megatron-Core layout strings (graph/layout.hpp): Megatron's grammar, its stage order and its
// checks, and errors that point at the character.
#include "pipewright/graph/layout.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"

namespace pipewright::graph {
namespace {

// The letters of each stage, as Megatron's parse_str_to_list gives them.
std::vector<std::string> letters(const MegatronLayout& layout) {
  std::vector<std::string> out;
  for (const LayoutStage& s : layout.stages) {
    std::string stage;
    for (const LayoutLayer& l : s.layers) stage += l.letter;
    out.push_back(stage);
  }
  return out;
}

std::vector<std::string> repeat(const std::string& stage, int n) {
  return std::vector<std::string>(static_cast<std::size_t>(n), stage);
}

TEST(MegatronLayout, ParsesAsMegatron) {
  // parse_str_to_list's docstring: "Ettt|(tt|)*29,m|L" -> [Ettt] + [tt]*29 + [m], [L].
  std::vector<std::string> want = {"Ettt"};
  for (const auto& s : repeat("tt", 29)) want.push_back(s);
  want.push_back("m");
  want.push_back("L");
  EXPECT_EQ(letters(parse_megatron_layout("Ettt|(tt|)*29,m|L")), want);
  EXPECT_EQ(letters(parse_megatron_layout("Et*3|(tt|)*29,m|L")), want);
}

// The shapes of Megatron's comments (xy(ab|cd|ef)*2,pq; (|ab)*2,cd): commas are cosmetic, a
// group may hold boundaries, |*n repeats a boundary.
TEST(MegatronLayout, GroupsLettersAndBoundaries) {
  EXPECT_EQ(letters(parse_megatron_layout("E(t|)*2,tL")),
            (std::vector<std::string>{"Et", "t", "tL"}));
  EXPECT_EQ(letters(parse_megatron_layout("(|Et)*2,L")),
            (std::vector<std::string>{"", "Et", "EtL"}));
  EXPECT_EQ(letters(parse_megatron_layout("Et*0|t*2L")), (std::vector<std::string>{"E", "ttL"}));
  EXPECT_EQ(letters(parse_megatron_layout("Et|*2L")), (std::vector<std::string>{"Et", "", "L"}));
  // A repeated letter keeps the position of its own character.
  const MegatronLayout l = parse_megatron_layout("Et*3|L");
  EXPECT_EQ(l.stages[0].layers[3].position, 1u);
  EXPECT_EQ(l.stages[0].end, 4u);
  EXPECT_EQ(l.stages[1].end, 6u);
}

void expect_error(const std::string& text, std::size_t column, const std::string& what) {
  try {
    (void)parse_megatron_layout(text);
    FAIL() << text << ": no error";
  } catch (const ParseError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--layout: character " + std::to_string(column) + ": "), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("\n  " + text + "\n  " + std::string(column, ' ') + "^"), std::string::npos)
        << msg;
  }
}

// Issue 44, item 7: nested repeats multiply; the expansion is bounded before anything is
// allocated, by the caller's limit (the model's size: resolve_partition) or 2^16 items.
TEST(MegatronLayout, ExpansionIsBoundedBeforeAllocating) {
  try {
    (void)parse_megatron_layout("E(t*65536|)*65536L");
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("expands to more than 65536 layers and stage ends"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)parse_megatron_layout("E(tt|)*8L", "--layout", 10);
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("expands to more than 10 layers and stage ends"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_megatron_layout("E(tt|)*3L", "--layout", 11).stages.size(), 4u);
}

TEST(MegatronLayout, BadStringsPointAtTheCharacter) {
  expect_error("Et*3|x|L", 5, "'x' is not a layer");
  expect_error("Et*|L", 2, "'*' must be followed by a count");
  expect_error("*t|L", 0, "repeats the letter or group before it");
  expect_error("E(t(t|)*2)*2|L", 3, "groups do not nest");
  expect_error("E(tt|L", 1, "'(' is never closed");
  expect_error("Ett)|L", 3, "')' closes no group");
  expect_error("E(tt|)L", 5, "must be followed by *N");
  expect_error("Et*99999999|L", 3, "repetition count beyond");
}

Model gpt(int layers) {
  GptSpec spec;
  spec.layers = layers;
  spec.hidden = 64;
  spec.heads = 4;
  spec.seq = 16;
  spec.vocab = 128;
  return make_gpt(spec);
}

TEST(MegatronLayout, PartitionPlacesLayersAsMegatron) {
  // 8 decoder layers, pp 2, 4 stages: V = 2; stage i is Megatron's vp_stage i / 2 of pp_rank
  // i % 2, and pipewright's looping placement puts stage i on rank i % 2 too.
  const Model model = gpt(8);  // embed, block0..7, ln_f, head
  const Partition p = layout_partition(model, parse_megatron_layout("Ett|ttt|tt|tL"), 2);
  ASSERT_EQ(p.num_stages(), 4);
  EXPECT_EQ(p.method, "custom");
  const std::vector<int> want = {0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3};
  EXPECT_EQ(p.node_stage, want);
  // The partition JSON reads back equal (method "custom").
  EXPECT_EQ(parse_partition(to_json(p), "p.json"), p);
}

void expect_partition_error(const std::string& text, int pp, std::size_t column,
                            const std::string& what) {
  const Model model = gpt(4);
  try {
    (void)layout_partition(model, parse_megatron_layout(text), pp);
    FAIL() << text << ": no error";
  } catch (const ParseError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("character " + std::to_string(column) + ": " + what), std::string::npos)
        << msg;
  }
}

TEST(MegatronLayout, ChecksTheModelAsMegatronDoes) {
  expect_partition_error("tE|ttt|L", 1, 0, "the first layer must be E");
  expect_partition_error("Ett|ttL|t", 1, 8, "the last layer must be L");
  expect_partition_error("Ett|ttt|L", 1, 6, "one t too many");
  expect_partition_error("Ett|t|L", 1, 7, "the layout has 3 t");
  expect_partition_error("Ett|tt|mL", 1, 7, "one m too many");
  expect_partition_error("Ett||ttL", 1, 4, "stage 1 holds no layer");
  expect_partition_error("Ett|tt|L", 2, 8, "the layout has 3 stages, which --pp 2 does not divide");
  expect_partition_error("EtEt|ttL", 1, 2, "one E too many");
}

TEST(MegatronLayout, MtpLayersAreMarkedBlocks) {
  Model model = gpt(4);
  for (Node& n : model.nodes) {
    if (n.name == "block3") n.attrs["megatron_layer"] = "mtp";
  }
  const Partition p = layout_partition(model, parse_megatron_layout("Ett|t|m|L"), 2);
  EXPECT_EQ(p.num_stages(), 4);
  EXPECT_THROW((void)layout_partition(model, parse_megatron_layout("Etm|t|t|L"), 2), ParseError);
}

}  // namespace
}  // namespace pipewright::graph
