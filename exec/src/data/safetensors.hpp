// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//   8 bytes   little-endian u64 N, the header size
//   N bytes   JSON object {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
//             "__metadata__": {string: string}} (space-padded)
//   rest      the tensors' raw little-endian bytes; offsets are relative to the end of the header
// The reader validates like the reference implementation: known dtype, offsets inside the data
// and covering it contiguously without overlap, byte size = numel x dtype size, header size
// within the file. Errors are ParseError naming the file and the field (JSON pointer), e.g.
// "w.safetensors: /0.weight/data_offsets: ...".
// Private to exec/: it names torch types.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pipewright::exec {

// Tensors of a file, by name. Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.
[[nodiscard]] std::map<std::string, torch::Tensor> load_safetensors(const std::string& path);
// Same from bytes; `name` is used in error messages. `metadata`, if given, receives
// "__metadata__".
[[nodiscard]] std::map<std::string, torch::Tensor> parse_safetensors(
    std::string_view bytes, const std::string& name,
    std::map<std::string, std::string>* metadata = nullptr);

// Serialises tensors in the given order (copied to CPU, made contiguous). Throws ConfigError for
// an empty or duplicate name, "__metadata__" as a name, or an unsupported dtype.
[[nodiscard]] std::string serialize_safetensors(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {});
// serialize_safetensors + atomic write (temp + fsync + rename).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace pipewright::exec
