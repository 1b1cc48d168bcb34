#include "data/npy.hpp"

#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "data/file_io.hpp"
#include "pipewright/graph/error.hpp"

// The raw data are copied with memcpy, which is correct only on little-endian hosts (npy files
// written by NumPy on any usual machine are '<').
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy.cpp assumes a little-endian host");

namespace pipewright::exec {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

// A value of the header dict: npy headers use only strings, booleans and tuples of integers.
struct HeaderValue {
  enum class Kind { kString, kBool, kTuple, kOther } kind = Kind::kOther;
  std::string text;  // kString; for kOther the raw text (for error messages)
  bool flag = false;
  std::vector<std::int64_t> ints;
};

// Parses the Python dict literal of an npy header, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  std::map<std::string, HeaderValue> parse_dict() {
    std::map<std::string, HeaderValue> out;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = parse_string("a key");
      expect(':');
      HeaderValue value = parse_value(key);
      PW_CHECK(out.emplace(key, std::move(value)).second, ParseError,
               name_ << ": npy header: duplicate key '" << key << "'");
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      PW_CHECK(peek() == '}', ParseError,
               name_ << ": npy header: expected ',' or '}' at column " << pos_ + 1);
    }
    ++pos_;
    skip_space();
    PW_CHECK(pos_ == text_.size(), ParseError,
             name_ << ": npy header: unexpected text after the dict at column " << pos_ + 1);
    return out;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skip_space();
    PW_CHECK(peek() == c, ParseError,
             name_ << ": npy header: expected '" << c << "' at column " << pos_ + 1);
    ++pos_;
  }
  std::string parse_string(const char* what) {
    skip_space();
    const char quote = peek();
    PW_CHECK(
        quote == '\'' || quote == '"', ParseError,
        name_ << ": npy header: expected " << what << " (a quoted string) at column " << pos_ + 1);
    const auto end = text_.find(quote, pos_ + 1);
    PW_CHECK(end != std::string_view::npos, ParseError,
             name_ << ": npy header: unterminated string at column " << pos_ + 1);
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  std::int64_t parse_int(const std::string& key) {
    skip_space();
    const std::size_t start = pos_;
    std::int64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const int digit = text_[pos_] - '0';
      PW_CHECK(v <= (std::numeric_limits<std::int64_t>::max() - digit) / 10, ParseError,
               name_ << ": npy header field '" << key << "': dimension too large");
      v = v * 10 + digit;
      ++pos_;
    }
    // Python 2 era writers emitted "3L".
    if (peek() == 'L') ++pos_;
    PW_CHECK(pos_ > start, ParseError,
             name_ << ": npy header field '" << key
                   << "': expected a non-negative integer at column " << start + 1);
    return v;
  }
  HeaderValue parse_value(const std::string& key) {
    skip_space();
    HeaderValue v;
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = HeaderValue::Kind::kString;
      v.text = parse_string("a value");
    } else if (text_.substr(pos_, 4) == "True") {
      v.kind = HeaderValue::Kind::kBool;
      v.flag = true;
      pos_ += 4;
    } else if (text_.substr(pos_, 5) == "False") {
      v.kind = HeaderValue::Kind::kBool;
      pos_ += 5;
    } else if (c == '(') {
      v.kind = HeaderValue::Kind::kTuple;
      ++pos_;
      while (true) {
        skip_space();
        if (peek() == ')') break;
        v.ints.push_back(parse_int(key));
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        PW_CHECK(peek() == ')', ParseError,
                 name_ << ": npy header field '" << key << "': expected ',' or ')' at column "
                       << pos_ + 1);
      }
      ++pos_;
    } else {
      // Structured dtypes ([...]) and anything else: keep the raw text for the error message.
      const std::size_t start = pos_;
      int depth = 0;
      while (pos_ < text_.size()) {
        const char d = text_[pos_];
        if (d == '[' || d == '(' || d == '{') ++depth;
        if (d == ']' || d == ')' || d == '}') {
          if (depth == 0) break;
          --depth;
        }
        if (d == ',' && depth == 0) break;
        ++pos_;
      }
      v.text = std::string(text_.substr(start, pos_ - start));
    }
    return v;
  }

  std::string_view text_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

std::uint32_t read_le(std::string_view bytes, std::size_t offset, std::size_t width) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < width; ++i) {
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return v;
}

using SourceType = NpyDtype;

SourceType parse_descr(const HeaderValue& v, const std::string& name) {
  PW_CHECK(v.kind == HeaderValue::Kind::kString, ParseError,
           name << ": npy header field 'descr': structured or non-string dtypes are not "
                   "supported (got "
                << v.text << "); use a plain float32/float64/int32/int64 array");
  const std::string& d = v.text;
  PW_CHECK(!d.empty() && d[0] != '>', ParseError,
           name << ": npy header field 'descr': big-endian data ('" << d
                << "') is not supported; convert with arr.astype(arr.dtype.newbyteorder('<'))");
  // '=' (native) and '|' (not applicable) mean little-endian on the hosts we support.
  const std::string code = (d[0] == '<' || d[0] == '=' || d[0] == '|') ? d.substr(1) : d;
  if (code == "f4") return SourceType::kF4;
  if (code == "f8") return SourceType::kF8;
  if (code == "i4") return SourceType::kI4;
  if (code == "i8") return SourceType::kI8;
  PW_CHECK(false, ParseError,
           name << ": npy header field 'descr': unsupported dtype '" << d
                << "' (supported: float32 '<f4', float64 '<f8', int32 '<i4', int64 '<i8')");
  return SourceType::kF4;
}

}  // namespace

std::size_t item_size(NpyDtype t) noexcept {
  return (t == NpyDtype::kF4 || t == NpyDtype::kI4) ? 4 : 8;
}

NpyType stored_type(NpyDtype t) noexcept {
  return (t == NpyDtype::kF4 || t == NpyDtype::kF8) ? NpyType::kFloat32 : NpyType::kInt64;
}

void convert_npy_items(NpyDtype source, const char* data, std::size_t count, void* out) {
  switch (source) {
    case NpyDtype::kF4:
    case NpyDtype::kI8:
      if (count > 0) std::memcpy(out, data, count * item_size(source));
      break;
    case NpyDtype::kF8: {
      auto* f = static_cast<float*>(out);
      for (std::size_t i = 0; i < count; ++i) {
        double v = 0;
        std::memcpy(&v, data + 8 * i, 8);
        f[i] = static_cast<float>(v);
      }
      break;
    }
    case NpyDtype::kI4: {
      auto* d = static_cast<std::int64_t*>(out);
      for (std::size_t i = 0; i < count; ++i) {
        std::int32_t v = 0;
        std::memcpy(&v, data + 4 * i, 4);
        d[i] = v;
      }
      break;
    }
  }
}

std::size_t npy_header_end(std::string_view bytes, const std::string& name) {
  PW_CHECK(bytes.size() >= 10 && bytes.substr(0, kMagic.size()) == kMagic, ParseError,
           name << ": not an npy file (missing the \\x93NUMPY magic string)");
  const int major = static_cast<unsigned char>(bytes[6]);
  PW_CHECK(major >= 1 && major <= 3, ParseError,
           name << ": npy format version " << major << "."
                << static_cast<int>(static_cast<unsigned char>(bytes[7]))
                << " is not supported (1.0, 2.0, 3.0 are)");
  const std::size_t len_width = major == 1 ? 2 : 4;
  const std::size_t header_start = 8 + len_width;
  PW_CHECK(bytes.size() >= header_start, ParseError, name << ": truncated npy header length");
  return header_start + read_le(bytes, 8, len_width);
}

const char* to_string(NpyType type) noexcept {
  return type == NpyType::kFloat32 ? "float32" : "int64";
}

std::int64_t NpyArray::numel() const noexcept {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return shape.empty() ? 0 : n;
}

NpyHeader parse_npy_header(std::string_view bytes, std::uint64_t file_size,
                           const std::string& name) {
  const std::size_t header_end = npy_header_end(bytes, name);
  const std::size_t header_start = static_cast<unsigned char>(bytes[6]) == 1 ? 10 : 12;
  const std::size_t header_len = header_end - header_start;
  PW_CHECK(bytes.size() >= header_end, ParseError,
           name << ": truncated npy header (" << header_len << " bytes declared, "
                << bytes.size() - header_start << " present)");
  // Version 3 headers are UTF-8; the keys and values we accept are all ASCII anyway.
  const std::string_view header = bytes.substr(header_start, header_len);

  const auto dict = HeaderParser(header, name).parse_dict();
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    PW_CHECK(dict.count(key) != 0, ParseError, name << ": npy header has no '" << key << "' key");
  }
  for (const auto& [key, value] : dict) {
    PW_CHECK(key == "descr" || key == "fortran_order" || key == "shape", ParseError,
             name << ": npy header has an unexpected key '" << key << "'");
  }
  NpyHeader out;
  out.dtype = parse_descr(dict.at("descr"), name);
  const HeaderValue& fortran = dict.at("fortran_order");
  PW_CHECK(fortran.kind == HeaderValue::Kind::kBool, ParseError,
           name << ": npy header field 'fortran_order': expected True or False");
  PW_CHECK(!fortran.flag, ParseError,
           name << ": npy header field 'fortran_order': Fortran-order arrays are not supported; "
                   "save np.ascontiguousarray(arr)");
  const HeaderValue& shape = dict.at("shape");
  PW_CHECK(shape.kind == HeaderValue::Kind::kTuple, ParseError,
           name << ": npy header field 'shape': expected a tuple of integers");
  PW_CHECK(shape.ints.size() == 1 || shape.ints.size() == 2, ParseError,
           name << ": npy header field 'shape': expected a 1-D or 2-D array (rows of samples), got "
                << shape.ints.size() << " dimensions");

  out.shape = shape.ints;
  out.data_offset = header_end;
  const std::size_t available = file_size - header_end;
  const std::size_t isize = item_size(out.dtype);
  std::size_t count = 1;
  for (const auto d : out.shape) {
    PW_CHECK(d == 0 || count <= available / isize / static_cast<std::size_t>(d), ParseError,
             name << ": npy data truncated: shape needs more than the " << available
                  << " data bytes present");
    count *= static_cast<std::size_t>(d);
  }
  PW_CHECK(count * isize == available, ParseError,
           name << ": npy data size mismatch: shape needs " << count * isize << " bytes, file has "
                << available << (count * isize > available ? " (truncated)" : " (trailing bytes)"));
  out.count = count;
  return out;
}

NpyArray parse_npy(std::string_view bytes, const std::string& name) {
  const NpyHeader h = parse_npy_header(bytes, bytes.size(), name);
  NpyArray out;
  out.shape = h.shape;
  out.type = stored_type(h.dtype);
  void* dst = nullptr;
  if (out.type == NpyType::kFloat32) {
    out.f32.resize(h.count);
    dst = out.f32.data();
  } else {
    out.i64.resize(h.count);
    dst = out.i64.data();
  }
  convert_npy_items(h.dtype, bytes.data() + h.data_offset, h.count, dst);
  return out;
}

NpyArray load_npy(const std::string& path) {
  return parse_npy(read_file_bytes(path, "npy file"), path);
}

std::string serialize_npy(const NpyArray& array, int version) {
  PW_CHECK(version >= 1 && version <= 3, ConfigError,
           "npy format version " << version << " is not supported (1, 2, 3 are)");
  PW_CHECK(!array.shape.empty(), ConfigError, "npy array has no shape");
  const std::size_t count = static_cast<std::size_t>(array.numel());
  const std::size_t have = array.type == NpyType::kFloat32 ? array.f32.size() : array.i64.size();
  PW_CHECK(count == have, ConfigError,
           "npy array shape holds " << count << " elements but " << have << " are given");

  std::ostringstream dict;
  dict << "{'descr': '" << (array.type == NpyType::kFloat32 ? "<f4" : "<i8")
       << "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < array.shape.size(); ++i) {
    dict << (i ? ", " : "") << array.shape[i];
  }
  dict << (array.shape.size() == 1 ? ",), }" : "), }");
  std::string header = dict.str();
  // Pad with spaces and a final newline so the data start at a multiple of 64 bytes.
  const std::size_t prefix = version == 1 ? 10 : 12;
  const std::size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');
  PW_CHECK(version != 1 || header.size() <= 0xffff, ConfigError,
           "npy header too long for format version 1");

  std::string out(kMagic);
  out.push_back(static_cast<char>(version));
  out.push_back(0);
  const std::size_t len_width = version == 1 ? 2 : 4;
  for (std::size_t i = 0; i < len_width; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  out += header;
  if (array.type == NpyType::kFloat32) {
    out.append(reinterpret_cast<const char*>(array.f32.data()), count * 4);
  } else {
    out.append(reinterpret_cast<const char*>(array.i64.data()), count * 8);
  }
  return out;
}

void save_npy(const std::string& path, const NpyArray& array, int version) {
  write_file_atomically(path, serialize_npy(array, version));
}

}  // namespace pipewright::exec
