// NumPy .npy reader and writer (format versions 1.0, 2.0 and 3.0), without libtorch.
//
// pipewright's training data are rows: a 1-D array (one value per sample) or a 2-D array (one
// row per sample), in C order, little-endian. The reader accepts
//   float32 ('<f4'), float64 ('<f8', converted to float32),
//   int64 ('<i8') and int32 ('<i4', converted to int64)
// and rejects everything else with a ParseError naming the file and the header field: Fortran
// order, big-endian data, other dtypes, 0-D or >2-D shapes, truncated data, malformed headers.
// The writer (used by tests and tools) writes float32 or int64 arrays in any of the versions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipewright::exec {

enum class NpyType : std::uint8_t { kFloat32, kInt64 };

[[nodiscard]] const char* to_string(NpyType type) noexcept;

// A loaded array. Exactly one of f32 / i64 holds the data (by `type`), in C order.
struct NpyArray {
  NpyType type = NpyType::kFloat32;
  std::vector<std::int64_t> shape;  // 1 or 2 dimensions
  std::vector<float> f32;
  std::vector<std::int64_t> i64;

  [[nodiscard]] std::int64_t numel() const noexcept;
  [[nodiscard]] std::int64_t rows() const noexcept { return shape.empty() ? 0 : shape[0]; }
};

// Reads `path`. Throws ConfigError if it cannot be read, ParseError if it is not a supported npy.
[[nodiscard]] NpyArray load_npy(const std::string& path);

// Parses npy bytes; `name` is used in error messages (normally the file path).
[[nodiscard]] NpyArray parse_npy(std::string_view bytes, const std::string& name);

// Serialises `array` ('<f4' or '<i8', C order) with header format `version` (1, 2 or 3).
// Throws ConfigError if the shape does not match the data or the version is unknown.
[[nodiscard]] std::string serialize_npy(const NpyArray& array, int version = 1);

// serialize_npy + atomic write.
void save_npy(const std::string& path, const NpyArray& array, int version = 1);

}  // namespace pipewright::exec
