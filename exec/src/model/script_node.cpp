#include "model/script_node.hpp"

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "compat/torch_compat.hpp"
#include "model/model_check.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

// The first line of a c10::Error without its C++ backtrace (TorchScript adds many lines).
std::string short_message(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  const auto nl = text.find('\n');
  if (nl != std::string::npos) text.resize(nl);
  return text;
}

std::vector<std::string> split_path(const std::string& name) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(name);
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

}  // namespace

// Note [Node files from a newer torch]: TorchScript archives are read by an older libtorch only
// while no newer operator or file-format version is used, and torch 2.x writes files that 1.13
// may misread in ways its loader does not catch. pipewright-export records the torch that wrote
// the nodes (model.json source.torch); a model exported by a newer MAJOR.MINOR than this
// executor's libtorch is refused before any node is loaded, naming both versions. Older files
// load (torch reads its earlier formats).
void check_node_files_torch(const graph::Model& model) {
  if (!model.source || model.source->torch.empty()) return;
  const bool scripted = std::any_of(model.nodes.begin(), model.nodes.end(),
                                    [](const graph::Node& n) { return n.script.has_value(); });
  if (!scripted) return;
  const std::string& written_by = model.source->torch;
  int major = 0;
  int minor = 0;
  if (std::sscanf(written_by.c_str(), "%d.%d", &major, &minor) != 2) return;
  const bool newer =
      major > compat::kTorchMajor || (major == compat::kTorchMajor && minor > compat::kTorchMinor);
  PW_CHECK(!newer, ConfigError,
           model.name << ": its TorchScript nodes were written by torch " << written_by
                      << " (model.json source.torch), newer than this executor's libtorch "
                      << TORCH_VERSION << "; export with torch <= " << compat::kTorchMajor << "."
                      << compat::kTorchMinor << ", or build pipewright against torch >= " << major
                      << "." << minor << " (-DPIPEWRIGHT_TORCH_PYTHON, docs/gpu.md)");
}

struct ScriptNode::Impl {
  torch::jit::Module module;
  std::string node;  // "node 'transformer.h.0' (file nodes/003_transformer.h.0.pt)"
  std::size_t outputs = 1;

  // The module owning the last component of `name`, and that component; nullopt if a path
  // component is missing or not a module.
  std::optional<std::pair<torch::jit::Module, std::string>> owner(const std::string& name) const {
    const std::vector<std::string> parts = split_path(name);
    if (parts.empty()) return std::nullopt;
    torch::jit::Module m = module;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!m.hasattr(parts[i])) return std::nullopt;
      const c10::IValue v = m.attr(parts[i]);
      if (!v.isModule()) return std::nullopt;
      m = v.toModule();
    }
    if (!m.hasattr(parts.back())) return std::nullopt;
    return std::make_pair(m, parts.back());
  }
};

ScriptNode::ScriptNode(const graph::Node& node, torch::Device device, torch::Dtype dtype)
    : impl_(std::make_unique<Impl>()) {
  PW_ASSERT(node.script.has_value(), "node '" << node.name << "' is not a torchscript node");
  const graph::ScriptSpec& spec = *node.script;
  impl_->node = "node '" + node.name + "' (file " + spec.path + ")";
  impl_->outputs = spec.outputs.size();
  static std::once_flag no_optimize;  // Note [TorchScript autograd]
  std::call_once(no_optimize, [] { torch::jit::setGraphExecutorOptimize(false); });

  std::error_code ec;
  PW_CHECK(std::filesystem::is_regular_file(spec.path, ec), ConfigError,
           impl_->node << ": the TorchScript file does not exist (model.json script.file \""
                       << spec.file << "\", resolved against the model file's folder)");
  try {
    impl_->module = torch::jit::load(spec.path, torch::kCPU);
  } catch (const std::exception& e) {
    throw ConfigError(impl_->node + ": not a TorchScript module this libtorch (" +
                      std::string(TORCH_VERSION) + ") can load: " + short_message(e));
  }
  impl_->module.train(true);
  if (dtype != torch::kFloat) impl_->module.to(dtype);
  if (device != torch::Device(torch::kCPU)) impl_->module.to(device);

  // Listed parameters: present, a tensor, of the listed shape.
  std::map<const void*, std::string> listed;  // storage -> listed name
  for (const graph::ScriptParameter& p : spec.parameters) {
    const auto at = impl_->owner(p.name);
    PW_CHECK(
        at && at->first.attr(at->second).isTensor(), ConfigError,
        impl_->node << ": the module has no parameter '" << p.name << "' that model.json lists");
    torch::Tensor t = at->first.attr(at->second).toTensor();
    PW_CHECK(t.sizes().vec() == p.shape, ConfigError,
             impl_->node << ": parameter '" << p.name << "' has shape "
                         << shape_text(t.sizes().vec()) << " but model.json lists "
                         << shape_text(p.shape));
    PW_CHECK(t.is_floating_point(), ConfigError,
             impl_->node << ": parameter '" << p.name << "' has dtype "
                         << c10::toString(t.scalar_type())
                         << "; parameters must be floating point");
    t.requires_grad_(true);
    listed.emplace(t.data_ptr(), p.name);
  }
  // Every parameter of the module must be listed: one that is not would silently stay frozen. A
  // second attribute of a listed tensor (saving made it a separate tensor on the same storage)
  // is pointed back at the listed one, so autograd accumulates both uses into one gradient.
  std::vector<std::pair<std::string, std::string>> retie;  // (attribute path, listed name)
  for (const auto& item : impl_->module.named_parameters(/*recurse=*/true)) {
    const auto it = listed.find(item.value.data_ptr());
    PW_CHECK(it != listed.end(), ConfigError,
             impl_->node << ": the module has parameter '" << item.name
                         << "', which model.json does not list");
    if (item.name != it->second) retie.emplace_back(item.name, it->second);
  }
  for (const auto& [path, name] : retie) set(path, get(name));
  for (const graph::ScriptBuffer& b : spec.buffers) {
    const auto at = impl_->owner(b.name);
    PW_CHECK(at && at->first.attr(at->second).isTensor(), ConfigError,
             impl_->node << ": the module has no buffer '" << b.name << "' that model.json lists");
    const torch::Tensor t = at->first.attr(at->second).toTensor();
    PW_CHECK(t.sizes().vec() == b.shape, ConfigError,
             impl_->node << ": buffer '" << b.name << "' has shape " << shape_text(t.sizes().vec())
                         << " but model.json lists " << shape_text(b.shape));
  }
}

ScriptNode::~ScriptNode() = default;

torch::Tensor ScriptNode::get(const std::string& name) const {
  const auto at = impl_->owner(name);
  PW_ASSERT(at && at->first.attr(at->second).isTensor(),
            impl_->node << " has no tensor '" << name << "'");
  return at->first.attr(at->second).toTensor();
}

void ScriptNode::set(const std::string& name, const torch::Tensor& tensor) {
  auto at = impl_->owner(name);
  PW_ASSERT(at.has_value(), impl_->node << " has no attribute '" << name << "'");
  at->first.setattr(at->second, tensor);
}

std::vector<torch::Tensor> ScriptNode::forward(const std::vector<torch::Tensor>& inputs) const {
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  c10::IValue result;
  try {
    result = impl_->module.forward(args);
  } catch (const std::exception& e) {
    std::ostringstream shapes;
    for (const auto& t : inputs) {
      shapes << " " << c10::toString(t.scalar_type()) << shape_text(t.sizes().vec());
    }
    throw ConfigError(impl_->node + ": forward on inputs" + shapes.str() +
                      " failed: " + short_message(e));
  }
  std::vector<torch::Tensor> out;
  if (result.isTensor()) {
    out.push_back(result.toTensor());
  } else if (result.isTuple()) {
    for (const auto& v : result.toTupleRef().elements()) {
      PW_CHECK(v.isTensor(), ConfigError,
               impl_->node << ": forward returned a tuple holding a " << v.tagKind()
                           << "; results must be tensors");
      out.push_back(v.toTensor());
    }
  } else if (result.isTensorList()) {
    for (const auto& t : result.toTensorVector()) out.push_back(t);
  } else {
    PW_CHECK(false, ConfigError,
             impl_->node << ": forward returned a " << result.tagKind()
                         << "; expected a tensor or a tuple of tensors");
  }
  PW_CHECK(out.size() == impl_->outputs, ConfigError,
           impl_->node << ": forward returned " << out.size() << " tensor(s) but model.json lists "
                       << impl_->outputs << " output(s)");
  return out;
}

}  // namespace pipewright::exec
