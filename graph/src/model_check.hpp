// validate_model with positions (private to graph/): the model reader passes the file's text, so
// the checks on a parsed model name file, line:column and JSON pointer like the reader's own.
#pragma once

#include <string>

#include "pipewright/graph/json_reader.hpp"
#include "pipewright/graph/model.hpp"

namespace pipewright::graph::detail {

// The checks of graph::validate_model. `list` is the key the nodes came from in the file
// ("nodes", or "layers" for a chain), so pointers name what the file holds.
void validate_model(const Model& model, const json::Source& source, const std::string& list);

}  // namespace pipewright::graph::detail
