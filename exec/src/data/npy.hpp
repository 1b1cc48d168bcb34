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

#include <cstddef>
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

// The on-disk element type of a supported npy file; stored_type says what it is read as.
enum class NpyDtype : std::uint8_t { kF4, kF8, kI4, kI8 };

[[nodiscard]] std::size_t item_size(NpyDtype t) noexcept;  // bytes per element on disk
[[nodiscard]] NpyType stored_type(NpyDtype t) noexcept;    // f4, f8 -> float32; i4, i8 -> int64

// A validated npy header: `count` elements of `dtype` start at byte `data_offset` of the file.
struct NpyHeader {
  NpyDtype dtype = NpyDtype::kF4;
  std::vector<std::int64_t> shape;  // 1 or 2 dimensions
  std::size_t data_offset = 0;
  std::size_t count = 0;
};

// The byte offset where the header of an npy file ends (= its data start), from its first bytes
// (at least 12, or the whole file if shorter). Throws ParseError (not npy, unknown version).
[[nodiscard]] std::size_t npy_header_end(std::string_view bytes, const std::string& name);

// Parses and checks the header at the start of `bytes` (the file's first bytes, at least
// npy_header_end of them or the whole file) of a file of `file_size` bytes: every check of
// parse_npy, including that the data size matches the shape. Throws ParseError naming `name`.
[[nodiscard]] NpyHeader parse_npy_header(std::string_view bytes, std::uint64_t file_size,
                                         const std::string& name);

// Converts `count` elements of `source` at `data` to stored_type(source) at `out` (float or
// int64_t, room for `count`).
void convert_npy_items(NpyDtype source, const char* data, std::size_t count, void* out);

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
