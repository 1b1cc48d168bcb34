// Lazy row access to an .npy file (issue 24, item 5): the header is read and checked when the
// file is opened (every check of parse_npy, npy.hpp, including that the data size matches the
// shape), and rows are then read on demand with pread, so a dataset larger than memory trains
// and start-up does not wait for the whole file. Elements are converted as load_npy converts
// them (float64 -> float32, int32 -> int64).
//
// read_rows is const and thread-safe (pread on one descriptor, an atomic byte counter): the
// prefetching loader (prefetch.hpp) calls it on its thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/npy.hpp"

namespace pipewright::exec {

class NpyFile {
 public:
  // Opens `path` (a regular file). Throws ConfigError if it cannot be opened or read, ParseError
  // if it is not a supported npy (both name the file).
  explicit NpyFile(std::string path);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] NpyType type() const noexcept { return stored_type(header_.dtype); }
  [[nodiscard]] const std::vector<std::int64_t>& shape() const noexcept { return header_.shape; }
  [[nodiscard]] std::int64_t rows() const noexcept { return header_.shape[0]; }
  // Elements per row: shape[1] for a 2-D array, 1 for a 1-D array.
  [[nodiscard]] std::int64_t row_elems() const noexcept {
    return header_.shape.size() == 2 ? header_.shape[1] : 1;
  }

  // Copies rows `indices` (each in [0, rows()), repeats allowed) one after another to `out`,
  // which holds indices.size() * row_elems() elements of type() (float or int64_t). Runs of
  // consecutive indices are read with one call. Throws ParseError naming the file and the sample
  // index if the file cannot be read there (e.g. it was truncated after it was opened).
  void read_rows(const std::vector<std::int64_t>& indices, void* out) const;

  // The smallest and largest value of an int64 file, read through once in chunks of a few MiB
  // (not kept); nullopt for float data or no elements.
  [[nodiscard]] std::optional<std::pair<std::int64_t, std::int64_t>> int_range() const;

  // Data bytes read from the file by read_rows so far (not the header, not int_range).
  [[nodiscard]] std::uint64_t bytes_read() const noexcept { return bytes_read_.load(); }

 private:
  // Reads `size` bytes at file offset `offset` into `dst`; `what` describes them for errors.
  void read_exact(std::uint64_t offset, std::size_t size, char* dst, const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  NpyHeader header_;
  mutable std::atomic<std::uint64_t> bytes_read_{0};
};

}  // namespace pipewright::exec
