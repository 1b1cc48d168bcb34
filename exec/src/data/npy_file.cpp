#include "data/npy_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"

namespace pipewright::exec {

NpyFile::NpyFile(std::string path) : path_(std::move(path)) {
  // Regular files only, as read_file_bytes (a FIFO would block, /dev/zero would never end).
  try {
    (void)json::check_input_file(path_, "npy file", std::numeric_limits<std::uint64_t>::max());
  } catch (const InputError& e) {
    throw ConfigError(e.what());
  }
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  PW_CHECK(fd_ >= 0, ConfigError,
           "cannot open npy file '" << path_ << "': " << std::strerror(errno));
  try {
    struct stat st {};
    PW_CHECK(::fstat(fd_, &st) == 0, ConfigError,
             "cannot read npy file '" << path_ << "': " << std::strerror(errno));
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    // The fixed prefix first (magic, version, header length), then the whole header.
    std::string head(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, 12)), '\0');
    read_exact(0, head.size(), head.data(), "the npy header");
    const std::size_t end = npy_header_end(head, path_);
    if (end > head.size()) {
      head.resize(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, end)));
      read_exact(12, head.size() - 12, head.data() + 12, "the npy header");
    }
    header_ = parse_npy_header(head, file_size, path_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

NpyFile::~NpyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void NpyFile::read_exact(std::uint64_t offset, std::size_t size, char* dst,
                         const std::string& what) const {
  std::size_t done = 0;
  while (done < size) {
    const ::ssize_t n = ::pread(fd_, dst + done, size - done, static_cast<::off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    PW_CHECK(n >= 0, ParseError, path_ << ": cannot read " << what << ": " << std::strerror(errno));
    if (n == 0) {
      struct stat st {};
      const long long now = ::fstat(fd_, &st) == 0 ? static_cast<long long>(st.st_size) : -1;
      PW_CHECK(false, ParseError,
               path_ << ": cannot read " << what << " (bytes " << offset << " to " << offset + size
                     << "): the file is now " << now
                     << " bytes long (was it truncated after it was opened?)");
    }
    done += static_cast<std::size_t>(n);
  }
}

void NpyFile::read_rows(const std::vector<std::int64_t>& indices, void* out) const {
  const std::size_t isize = item_size(header_.dtype);
  const auto elems = static_cast<std::size_t>(row_elems());
  const std::size_t row_bytes = elems * isize;
  const std::size_t out_row_bytes = elems * (type() == NpyType::kFloat32 ? 4 : 8);
  // float32 and int64 files are copied as they are; float64 and int32 go through `staging`.
  const bool same = header_.dtype == NpyDtype::kF4 || header_.dtype == NpyDtype::kI8;
  std::vector<char> staging;
  auto* dst = static_cast<char*>(out);
  for (std::size_t i = 0; i < indices.size();) {
    const std::int64_t first = indices[i];
    PW_CHECK(
        first >= 0 && first < rows(), ConfigError,
        "'" << path_ << "': sample index " << first << " is out of range [0, " << rows() << ")");
    std::size_t run = 1;
    while (i + run < indices.size() && indices[i + run] == first + static_cast<std::int64_t>(run) &&
           indices[i + run] < rows()) {
      ++run;
    }
    const std::uint64_t offset =
        header_.data_offset + static_cast<std::uint64_t>(first) * row_bytes;
    const std::string what = "sample " + std::to_string(first) +
                             (run > 1 ? " to " + std::to_string(first + run - 1) : "");
    if (same) {
      read_exact(offset, run * row_bytes, dst, what);
    } else {
      staging.resize(run * row_bytes);
      read_exact(offset, staging.size(), staging.data(), what);
      convert_npy_items(header_.dtype, staging.data(), run * elems, dst);
    }
    bytes_read_ += run * row_bytes;
    dst += run * out_row_bytes;
    i += run;
  }
}

std::optional<std::pair<std::int64_t, std::int64_t>> NpyFile::int_range() const {
  if (type() != NpyType::kInt64 || header_.count == 0) return std::nullopt;
  const std::size_t isize = item_size(header_.dtype);
  constexpr std::size_t kChunkElems = std::size_t{1} << 19;  // 4 MiB of int64 per read
  std::vector<char> raw(kChunkElems * isize);
  std::vector<std::int64_t> values(kChunkElems);
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = std::numeric_limits<std::int64_t>::min();
  for (std::size_t at = 0; at < header_.count; at += kChunkElems) {
    const std::size_t n = std::min(kChunkElems, header_.count - at);
    read_exact(header_.data_offset + at * isize, n * isize, raw.data(),
               "elements " + std::to_string(at) + " to " + std::to_string(at + n - 1));
    convert_npy_items(header_.dtype, raw.data(), n, values.data());
    const auto [mn, mx] = std::minmax_element(values.begin(), values.begin() + n);
    lo = std::min(lo, *mn);
    hi = std::max(hi, *mx);
  }
  return std::make_pair(lo, hi);
}

}  // namespace pipewright::exec
