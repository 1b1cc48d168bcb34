// `pipewright dataset list|info|gpt|export`: the datasets compiled into pipewright
// (exec/bundled_data.hpp, docs/data.md). `gpt` writes a GPT model JSON whose vocabulary matches
// the dataset, ready for `pipewright run --dataset NAME`; `export` writes its windows as .npy
// files for `--data-x/--data-y` or for other tools.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "exec_commands.hpp"
#include "pipewright/exec/bundled_data.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"

namespace pipewright::cli {
namespace {

// The vocabulary printed with C escapes for the non-printable characters ("\n").
std::string escaped(const std::string& vocab) {
  std::ostringstream os;
  for (const char c : vocab) {
    if (c == '\n') {
      os << "\\n";
    } else if (c == '\t') {
      os << "\\t";
    } else if (c == '\\') {
      os << "\\\\";
    } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      os << buf;
    } else {
      os << c;
    }
  }
  return os.str();
}

struct GptArgs {
  std::string name;
  graph::GptSpec spec;
  std::string output = "-";
};

struct ExportArgs {
  std::string name;
  std::int64_t seq = 0;
  std::int64_t first = 0;
  std::int64_t count = 0;
  std::string x_path;
  std::string y_path;
};

void setup_dataset(CLI::App& app) {
  auto* cmd = app.add_subcommand("dataset", std::string(exec_command_description("dataset")));
  cmd->require_subcommand(1, 1);

  cmd->add_subcommand("list", "List the bundled datasets")->callback([] {
    for (const auto& name : exec::bundled_dataset_names()) {
      const std::string text = exec::bundled_dataset_text(name);
      std::printf("%s\t%zu characters\tvocabulary %zu\n", name.c_str(), text.size(),
                  exec::char_vocabulary(text).size());
    }
  });

  auto info_name = std::make_shared<std::string>();
  auto* info = cmd->add_subcommand("info", "Size and vocabulary of a bundled dataset");
  info->add_option("name", *info_name, "dataset name (see `dataset list`)")->required();
  info->callback([info_name] {
    const std::string text = exec::bundled_dataset_text(*info_name);
    const std::string vocab = exec::char_vocabulary(text);
    std::printf("dataset: %s\ncharacters: %zu\nvocab_size: %zu\nvocabulary: \"%s\"\n",
                info_name->c_str(), text.size(), vocab.size(), escaped(vocab).c_str());
  });

  auto gpt = std::make_shared<GptArgs>();
  gpt->spec.layers = 2;
  gpt->spec.hidden = 64;
  gpt->spec.heads = 4;
  gpt->spec.seq = 64;
  gpt->spec.bytes_per_element = 4;  // the executor runs float32
  auto* g = cmd->add_subcommand(
      "gpt", "Write a GPT model JSON whose vocabulary matches a bundled dataset");
  g->add_option("name", gpt->name, "dataset name")->required();
  g->add_option("--layers,-l", gpt->spec.layers, "transformer blocks")->capture_default_str();
  g->add_option("--hidden", gpt->spec.hidden, "hidden size")->capture_default_str();
  g->add_option("--heads", gpt->spec.heads, "attention heads")->capture_default_str();
  g->add_option("--seq", gpt->spec.seq, "sequence length (characters per sample)")
      ->capture_default_str();
  g->add_option("--micro-batch-size,-b", gpt->spec.micro_batch_size,
                "micro batch the costs are computed for")
      ->capture_default_str();
  g->add_option("-o,--output", gpt->output, "output file (default: stdout)");
  g->callback([gpt] {
    graph::GptSpec spec = gpt->spec;
    spec.vocab = static_cast<std::int64_t>(
        exec::char_vocabulary(exec::bundled_dataset_text(gpt->name)).size());
    graph::Model model = graph::make_gpt(spec);
    model.name = gpt->name + "-gpt";
    write_output(gpt->output, graph::to_json(model));
    spdlog::info("model '{}': vocabulary {} (dataset '{}'), seq {}, {} layers, hidden {}",
                 model.name, spec.vocab, gpt->name, spec.seq, spec.layers, spec.hidden);
    if (gpt->output != "-") spdlog::info("wrote {}", gpt->output);
  });

  auto ex = std::make_shared<ExportArgs>();
  auto* e = cmd->add_subcommand("export", "Write a bundled dataset's windows as int64 .npy files");
  e->add_option("name", ex->name, "dataset name")->required();
  e->add_option("--seq", ex->seq, "sequence length")->required();
  e->add_option("--first", ex->first, "first window")->capture_default_str();
  e->add_option("--count", ex->count, "number of windows (0: all from --first)")
      ->capture_default_str();
  e->add_option("--x-out", ex->x_path, "inputs [count, seq] (.npy)")->required();
  e->add_option("--y-out", ex->y_path, "next-character targets [count, seq] (.npy)")->required();
  e->callback([ex] {
    const std::int64_t n =
        exec::export_char_windows(ex->name, ex->seq, ex->first, ex->count, ex->x_path, ex->y_path);
    spdlog::info("wrote {} windows of {} characters to {} and {}", n, ex->seq, ex->x_path,
                 ex->y_path);
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_dataset);

}  // namespace pipewright::cli
