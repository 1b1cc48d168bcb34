// Models, partitions, the model generators and rendering (`pipewright model`, `partition`,
// `render`), and the error classes.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/graph/render.hpp"
#include "pipewright/graph/version.hpp"

namespace py = pybind11;

namespace pipewright::python {
namespace {

graph::NodeKind parse_activation(const std::string& name) {
  PW_CHECK(name == "relu" || name == "gelu", ConfigError,
           "activation must be relu or gelu, got '" << name << "'");
  return name == "gelu" ? graph::NodeKind::kGelu : graph::NodeKind::kRelu;
}

graph::Model make_gpt(std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                      std::int64_t seq, std::int64_t vocab, std::int64_t micro_batch_size,
                      std::int64_t bytes_per_element, double device_tflops, double device_gbps) {
  graph::GptSpec spec;
  spec.layers = layers;
  spec.hidden = hidden;
  spec.heads = heads;
  spec.seq = seq;
  spec.vocab = vocab;
  spec.micro_batch_size = micro_batch_size;
  spec.bytes_per_element = bytes_per_element;
  spec.device.tflops = device_tflops;
  spec.device.gbps = device_gbps;
  return graph::make_gpt(spec);
}

graph::Model make_mlp(const std::vector<std::int64_t>& sizes, const std::string& activation,
                      std::int64_t micro_batch_size, bool bias, double device_tflops,
                      double device_gbps) {
  graph::MlpSpec spec;
  spec.sizes = sizes;
  spec.activation = parse_activation(activation);
  spec.micro_batch_size = micro_batch_size;
  spec.bias = bias;
  spec.device.tflops = device_tflops;
  spec.device.gbps = device_gbps;
  return graph::make_mlp(spec);
}

// `pipewright partition`'s options; in_flight as its --in-flight ("1f1b" or a count).
graph::Partition partition(const graph::Model& model, int stages, const std::string& method,
                           std::optional<std::int64_t> memory_limit_bytes,
                           std::optional<int> in_flight, double gradient_bytes_per_param_byte,
                           double optimizer_bytes_per_param_byte) {
  graph::PartitionOptions options;
  options.stages = stages;
  const auto parsed = graph::parse_partition_method(method);
  PW_CHECK(parsed.has_value(), ConfigError,
           "method must be uniform, balanced or memory, got '" << method << "'");
  options.method = *parsed;
  options.memory_limit_bytes = memory_limit_bytes;
  if (in_flight) {
    PW_CHECK(*in_flight >= 1, ConfigError, "in_flight must be >= 1, got " << *in_flight);
    options.in_flight_microbatches = in_flight;
  }
  options.gradient_bytes_per_param_byte = gradient_bytes_per_param_byte;
  options.optimizer_bytes_per_param_byte = optimizer_bytes_per_param_byte;
  return graph::partition_model(model, options);
}

// `pipewright render`: DOT text, SVG text or PNG bytes.
py::object render(const graph::Model& model, const graph::Partition* partition, bool stages_only,
                  const std::vector<int>& stage_to_rank, const std::string& format) {
  const auto image = graph::image_format_for_path("x." + format);
  PW_CHECK(image.has_value() && format != "gv", ConfigError,
           "format must be dot, svg or png, got '" << format << "'");
  if (partition != nullptr) graph::check_partition_matches(*partition, model, "partition");
  PW_CHECK(!stages_only || partition != nullptr, ConfigError, "stages_only needs a partition");
  graph::RenderOptions options;
  if (!stage_to_rank.empty()) {
    PW_CHECK(partition != nullptr, ConfigError, "stage_to_rank needs a partition");
    PW_CHECK(static_cast<int>(stage_to_rank.size()) == partition->num_stages(), ConfigError,
             "stage_to_rank has " << stage_to_rank.size() << " entries for "
                                  << partition->num_stages() << " stages");
    for (const int r : stage_to_rank) {
      PW_CHECK(r >= 0, ConfigError, "stage_to_rank: ranks must be >= 0, got " << r);
    }
    options.stage_to_rank = stage_to_rank;
  }
  const std::string dot = stages_only ? graph::render_stages_dot(model, *partition, options)
                                      : graph::render_model_dot(model, partition, options);
  std::string out = graph::render_image(dot, *image);
  if (*image == graph::ImageFormat::kPng) return py::bytes(out);
  return py::str(out);
}

}  // namespace

void bind_errors(py::module_& m) {
  // Registered base first: pybind11 tries the most recently registered translator first.
  auto error = py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  auto input = py::register_exception<InputError>(m, "InputError", error.ptr());
  py::register_exception<ParseError>(m, "ParseError", input.ptr());
  py::register_exception<InvalidGraphError>(m, "InvalidGraphError", input.ptr());
  py::register_exception<InvalidPlanError>(m, "InvalidPlanError", input.ptr());
  py::register_exception<ConfigError>(m, "ConfigError", input.ptr());
  py::register_exception<InternalError>(m, "InternalError", error.ptr());
  m.attr("__version__") = pipewright::version();
}

void bind_graph(py::module_& m) {
  py::class_<graph::Model>(m, "Model", "A model description (docs/model-format.md)")
      .def_readonly("name", &graph::Model::name)
      .def_readonly("micro_batch_size", &graph::Model::micro_batch_size)
      .def_property_readonly("node_names",
                             [](const graph::Model& model) {
                               std::vector<std::string> names;
                               for (const auto& n : model.nodes) names.push_back(n.name);
                               return names;
                             })
      .def("to_json", [](const graph::Model& model) { return graph::to_json(model); })
      .def_static(
          "from_json",
          [](const std::string& text, const std::string& source) {
            return graph::parse_model(text, source);
          },
          py::arg("text"), py::arg("source") = "model")
      .def(py::self == py::self)
      .def("__repr__", [](const graph::Model& model) {
        return "<pipewright.Model '" + model.name + "' with " + std::to_string(model.nodes.size()) +
               " nodes>";
      });

  py::class_<graph::Partition>(m, "Partition", "A model cut into stages (docs/partitioning.md)")
      .def_readonly("method", &graph::Partition::method)
      .def_readonly("model_name", &graph::Partition::model_name)
      .def_readonly("node_stage", &graph::Partition::node_stage)
      .def_property_readonly("num_stages", &graph::Partition::num_stages)
      .def_property_readonly("max_stage_ms", &graph::Partition::max_stage_ms)
      .def("to_json", [](const graph::Partition& p) { return graph::to_json(p); })
      .def_static(
          "from_json",
          [](const std::string& text, const std::string& source) {
            return graph::parse_partition(text, source);
          },
          py::arg("text"), py::arg("source") = "partition")
      .def(py::self == py::self)
      .def("__repr__", [](const graph::Partition& p) {
        return "<pipewright.Partition " + p.method + " of '" + p.model_name + "' into " +
               std::to_string(p.num_stages()) + " stages>";
      });

  m.def("load_model", &graph::load_model, py::arg("path"), "Reads a model JSON file");
  m.def("load_partition", &graph::load_partition, py::arg("path"), "Reads a partition JSON file");
  m.def("gpt", &make_gpt, py::kw_only(), py::arg("layers"), py::arg("hidden"), py::arg("heads"),
        py::arg("seq"), py::arg("vocab") = 50257, py::arg("micro_batch_size") = 1,
        py::arg("bytes_per_element") = 2, py::arg("device_tflops") = graph::DeviceModel{}.tflops,
        py::arg("device_gbps") = graph::DeviceModel{}.gbps,
        "A GPT model with costs (`pipewright model gpt`)");
  m.def("mlp", &make_mlp, py::arg("sizes"), py::kw_only(), py::arg("activation") = "relu",
        py::arg("micro_batch_size") = 1, py::arg("bias") = true,
        py::arg("device_tflops") = graph::DeviceModel{}.tflops,
        py::arg("device_gbps") = graph::DeviceModel{}.gbps,
        "An MLP in torch.nn.Sequential order (`pipewright model mlp`)");
  m.def("partition", &partition, py::arg("model"), py::kw_only(), py::arg("stages"),
        py::arg("method") = "balanced", py::arg("memory_limit_bytes") = py::none(),
        py::arg("in_flight") = py::none(), py::arg("gradient_bytes_per_param_byte") = 1.0,
        py::arg("optimizer_bytes_per_param_byte") = 2.0,
        "Cuts a model into stages (`pipewright partition`)");
  m.def("render", &render, py::arg("model"), py::arg("partition") = nullptr, py::kw_only(),
        py::arg("stages_only") = false, py::arg("stage_to_rank") = std::vector<int>{},
        py::arg("format") = "dot",
        "Draws a model or its stages (`pipewright render`): DOT or SVG text, PNG bytes");
  m.def("graphviz_available", &graph::graphviz_available,
        "Whether this build renders SVG/PNG in-process");
}

}  // namespace pipewright::python
