// Stages of torchscript nodes (issue 21) against the PyTorch module they were cut from: the
// fixture make_script_model.py writes the node files, model.json and the module's logits and
// gradients for one batch. Skipped when /usr/bin/python3 has no torch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "data/safetensors.hpp"
#include "model/model_check.hpp"
#include "model/stage_module.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/stage_graph.hpp"

namespace pipewright::exec {
namespace {

using graph::StageValue;
using ::testing::HasSubstr;

class ScriptStageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per process: ctest runs each test case as its own process, maybe in parallel.
    dir_ = new std::string(::testing::TempDir() + "/pw_script_stage." + std::to_string(getpid()));
    std::filesystem::remove_all(*dir_);
    const std::string cmd = "PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 " PIPEWRIGHT_SOURCE_DIR
                            "/tests/exec/make_script_model.py " +
                            *dir_;
    status_ = std::system(cmd.c_str());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!WIFEXITED(status_) || WEXITSTATUS(status_) == 77) {
      GTEST_SKIP() << "/usr/bin/python3 has no torch";
    }
    ASSERT_EQ(WEXITSTATUS(status_), 0) << "make_script_model.py failed";
    model_ = graph::load_model(*dir_ + "/model.json");
    expected_ = load_safetensors(*dir_ + "/expected.safetensors");
  }
  [[nodiscard]] const torch::Tensor& want(const std::string& name) const {
    return expected_.at(name);
  }
  // model.json with `from` replaced by `to`, loaded from the fixture folder.
  [[nodiscard]] graph::Model edited(const std::string& from, const std::string& to) const {
    std::ifstream in(*dir_ + "/model.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    const std::string path = *dir_ + "/edited.json";
    std::ofstream(path) << text;
    return graph::load_model(path);
  }

  static std::string* dir_;
  static int status_;
  graph::Model model_;
  std::map<std::string, torch::Tensor> expected_;
};

std::string* ScriptStageTest::dir_ = nullptr;
int ScriptStageTest::status_ = 0;

std::vector<std::string> names(const NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) out.push_back(name);
  return out;
}

TEST_F(ScriptStageTest, WholeModelMatchesTheModuleWithTiedWeightsInOneStage) {
  const StageModule whole = StageModule::whole_model(model_, {});
  // head.weight is embed.weight here: one trainable tensor, both names in the state_dict.
  EXPECT_EQ(
      names(whole.named_parameters()),
      (std::vector<std::string>{"embed.weight", "block.lin.weight", "block.lin.bias", "out.gain"}));
  EXPECT_EQ(whole.tie_groups(), (std::vector<std::string>{"embed.weight", "", "", ""}));
  EXPECT_EQ(names(whole.state_dict()),
            (std::vector<std::string>{"embed.weight", "block.lin.weight", "block.lin.bias",
                                      "out.gain", "head.weight", "block.scale", "out.calls"}));
  EXPECT_EQ(names(whole.named_buffers()),
            (std::vector<std::string>{"block.scale", "block.table", "out.calls"}));
  const auto out = whole.forward({want("idx")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(torch::allclose(out[0], want("logits"), 1e-6, 1e-6));
  const auto loss = compute_loss(out[0], want("target"), LossKind::kCrossEntropy);
  EXPECT_NEAR(loss.item<double>(), want("loss").item<double>(), 1e-6);
  loss.backward();
  for (const auto& [name, p] : whole.named_parameters()) {
    EXPECT_TRUE(torch::allclose(p.grad(), want("grad." + name), 1e-6, 1e-6)) << name;
  }
}

TEST_F(ScriptStageTest, SplitStagesChainToTheSameLogits) {
  // {embed} | {block, head, out}: the second stage reads the model input (head's input slot 2)
  // and embed's output; head.weight there is a separate copy of the tied group.
  const graph::StageGraph g = graph::build_stage_graph(model_, {0, 1, 1, 1}, 2);
  const StageModule first(model_, g.stages[0], {});
  const StageModule second(model_, g.stages[1], {});
  EXPECT_EQ(second.inputs(), (std::vector<StageValue>{{-1, 0}, {0, 0}}));
  EXPECT_EQ(
      names(second.named_parameters()),
      (std::vector<std::string>{"block.lin.weight", "block.lin.bias", "head.weight", "out.gain"}));
  EXPECT_EQ(second.tie_groups(), (std::vector<std::string>{"", "", "embed.weight", ""}));
  const auto h = first.forward({want("idx")});
  const auto out = second.forward({want("idx"), h.at(0)});
  ASSERT_EQ(second.prediction_output(), 0);
  EXPECT_TRUE(torch::allclose(out[0], want("logits"), 1e-6, 1e-6));
  // Gradients of the two copies sum to the module's gradient of the shared weight.
  compute_loss(out[0], want("target"), LossKind::kCrossEntropy).backward();
  const auto& copy0 = first.named_parameters()[0].second;
  const auto& copy1 = second.named_parameters()[2].second;
  EXPECT_TRUE(torch::allclose(copy0.grad() + copy1.grad(), want("grad.embed.weight"), 1e-6, 1e-6));
}

TEST_F(ScriptStageTest, BothOutputsOfANodeCrossTheCut) {
  const graph::StageGraph g = graph::build_stage_graph(model_, {0, 0, 1, 1}, 2);
  const StageModule first(model_, g.stages[0], {});
  const StageModule second(model_, g.stages[1], {});
  EXPECT_EQ(first.outputs(), (std::vector<StageValue>{{1, 0}, {1, 1}}));
  ASSERT_EQ(first.output_types().size(), 2u);
  EXPECT_EQ(first.output_types()[1], (ValueType{false, {3, 4}}));
  const auto mid = first.forward({want("idx")});
  ASSERT_EQ(mid.size(), 2u);
  const auto out = second.forward({want("idx"), mid[0], mid[1]});
  EXPECT_TRUE(torch::allclose(out[0], want("logits"), 1e-6, 1e-6));
}

TEST_F(ScriptStageTest, InitLoadsStateDictNamesAndPersistentBuffers) {
  StageModule whole = StageModule::whole_model(model_, {});
  std::map<std::string, torch::Tensor> init = load_safetensors(*dir_ + "/init.safetensors");
  for (auto& [name, t] : init) t = torch::full_like(t, 0.25);
  whole.load_parameters(init, "init.safetensors");
  for (const auto& [name, t] : whole.state_dict()) {
    if (name == "out.calls") {
      EXPECT_TRUE(torch::all(t == 0).item<bool>()) << name;  // int64: 0.25 -> 0
    } else {
      EXPECT_TRUE(torch::all(t == 0.25).item<bool>()) << name;
    }
  }
  init.erase("block.lin.bias");
  const std::string msg = [&] {
    try {
      whole.load_parameters(init, "init.safetensors");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_THAT(msg, HasSubstr("init.safetensors: has no tensor 'block.lin.bias'"));
}

TEST_F(ScriptStageTest, ModelChecksUseTheDeclaredTypes) {
  const auto types = infer_output_types(model_);
  ASSERT_EQ(types.size(), 4u);
  EXPECT_EQ(types[1].size(), 2u);
  EXPECT_EQ(types[3][0], (ValueType{false, {3, 10}}));
  check_data_matches_model(ValueType{true, {3}}, ValueType{true, {3}}, model_,
                           LossKind::kCrossEntropy, "x", "y");
  EXPECT_THROW(check_data_matches_model(ValueType{true, {4}}, ValueType{true, {3}}, model_,
                                        LossKind::kCrossEntropy, "x", "y"),
               ConfigError);
  // Not executable: a built-in node among torchscript ones, several model inputs, an edge
  // between values of different types.
  graph::Model mixed = model_;
  mixed.nodes[3].kind = graph::NodeKind::kRelu;
  mixed.nodes[3].script.reset();
  const auto message = [](const graph::Model& m) {
    try {
      (void)infer_output_types(m);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(mixed), HasSubstr("models mixing torchscript and built-in node kinds"));
  graph::Model two_inputs = model_;
  two_inputs.inputs = {{"idx", "int64", {3}}, {"pos", "int64", {3}}};
  EXPECT_THAT(message(two_inputs), HasSubstr("trains models with one data input"));
  graph::Model retyped = model_;
  retyped.nodes[3].script->inputs[0].shape = {3, 11};
  EXPECT_THAT(message(retyped), HasSubstr("input 0 'x' is declared float32 [3, 11] but receives "
                                          "output 0 of node 'head'"));
}

// Runs `fn`, expecting a ConfigError, and returns its message.
template <typename Fn>
std::string config_error(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no error";
}

TEST_F(ScriptStageTest, BadInputNamesTheFileAndTheTensor) {
  const auto build = [](const graph::Model& m) { (void)StageModule::whole_model(m, {}); };
  const graph::Model missing = edited("nodes/1_block.pt", "nodes/9_missing.pt");
  std::string msg = config_error([&] { build(missing); });
  EXPECT_THAT(msg, HasSubstr("node 'block'"));
  EXPECT_THAT(msg, HasSubstr("9_missing.pt"));
  EXPECT_THAT(msg, HasSubstr("does not exist"));
  msg = config_error([&] { build(edited("nodes/1_block.pt", "nodes/not_torchscript.pt")); });
  EXPECT_THAT(msg, HasSubstr("not_torchscript.pt): not a TorchScript module"));
  msg = config_error([&] { build(edited("\"block.lin.bias\"", "\"block.lin.nope\"")); });
  EXPECT_THAT(msg, HasSubstr("1_block.pt): the module has no parameter 'block.lin.nope'"));
  msg = config_error([&] {
    build(edited("\"block.lin.weight\", \"dtype\": \"float32\", \"shape\": [4, 4]",
                 "\"block.lin.weight\", \"dtype\": \"float32\", \"shape\": [4, 5]"));
  });
  EXPECT_THAT(msg, HasSubstr("parameter 'block.lin.weight' has shape [4, 4] but model.json lists "
                             "[4, 5]"));
  msg = config_error([&] { build(edited("\"block.scale\"", "\"block.gone\"")); });
  EXPECT_THAT(msg, HasSubstr("the module has no buffer 'block.gone'"));
}

// Note [Node files from a newer torch]: refused before loading, both versions named; the same or
// an older torch loads.
TEST_F(ScriptStageTest, NodeFilesFromANewerTorchAreRefused) {
  const auto build = [](const graph::Model& m) { (void)StageModule::whole_model(m, {}); };
  graph::Model m = model_;
  ASSERT_TRUE(m.source.has_value());
  m.source->torch = "99.1.0+cu999";
  const std::string msg = config_error([&] { build(m); });
  EXPECT_THAT(msg, HasSubstr("written by torch 99.1.0+cu999 (model.json source.torch), newer than "
                             "this executor's libtorch " +
                             std::string(TORCH_VERSION)));
  m.source->torch = "1.0.0";
  EXPECT_NO_THROW(build(m));
  m.source->torch =
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + ".99";
  EXPECT_NO_THROW(build(m));
}

}  // namespace
}  // namespace pipewright::exec
