#include "data/safetensors.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "data/file_io.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"

// Tensor bytes are copied as they are in memory, which is the format's little-endian order only
// on little-endian hosts.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors.cpp assumes a little-endian host");

namespace pipewright::exec {

namespace {

using Json = nlohmann::json;

// Headers larger than this are rejected before parsing, like the reference implementation.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DtypeEntry {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeEntry kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

// JSON pointer of a tensor name (RFC 6901 escaping).
std::string pointer(const std::string& key) { return json::pointer_append("", key); }

struct Entry {
  std::string name;
  at::ScalarType type;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

Entry parse_entry(const std::string& file, const std::string& name, const Json& v) {
  const std::string where = file + ": " + pointer(name);
  PW_CHECK(v.is_object(), ParseError,
           where << ": expected an object with dtype, shape, data_offsets");
  for (const auto& [key, value] : v.items()) {
    PW_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", ParseError,
             where << "/" << key << ": unexpected key");
  }
  Entry e;
  e.name = name;
  const auto dtype = v.find("dtype");
  PW_CHECK(dtype != v.end() && dtype->is_string(), ParseError,
           where << "/dtype: missing or not a string");
  const std::string dt = dtype->get<std::string>();
  const auto* found = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                   [&](const DtypeEntry& d) { return dt == d.name; });
  PW_CHECK(found != std::end(kDtypes), ParseError,
           where << "/dtype: unsupported dtype '" << dt
                 << "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
  e.type = found->type;
  const auto shape = v.find("shape");
  PW_CHECK(shape != v.end() && shape->is_array(), ParseError,
           where << "/shape: missing or not an array");
  for (std::size_t i = 0; i < shape->size(); ++i) {
    const Json& d = (*shape)[i];
    PW_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<std::int64_t>() >= 0),
             ParseError, where << "/shape/" << i << ": expected a non-negative integer");
    const auto dim = d.get<std::uint64_t>();
    PW_CHECK(dim <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
             ParseError, where << "/shape/" << i << ": dimension too large");
    e.shape.push_back(static_cast<std::int64_t>(dim));
  }
  const auto offsets = v.find("data_offsets");
  PW_CHECK(offsets != v.end() && offsets->is_array() && offsets->size() == 2, ParseError,
           where << "/data_offsets: missing or not an array [begin, end]");
  for (std::size_t i = 0; i < 2; ++i) {
    PW_CHECK((*offsets)[i].is_number_unsigned(), ParseError,
             where << "/data_offsets/" << i << ": expected a non-negative integer");
  }
  e.begin = (*offsets)[0].get<std::uint64_t>();
  e.end = (*offsets)[1].get<std::uint64_t>();
  PW_CHECK(e.begin <= e.end, ParseError,
           where << "/data_offsets: begin " << e.begin << " is after end " << e.end);
  // Byte size = numel x element size, with overflow checks.
  const std::uint64_t elem = c10::elementSize(e.type);
  std::uint64_t bytes = elem;
  for (const auto dim : e.shape) {
    const auto d = static_cast<std::uint64_t>(dim);
    PW_CHECK(d == 0 || bytes <= std::numeric_limits<std::uint64_t>::max() / d, ParseError,
             where << "/shape: too many elements");
    bytes *= d;
  }
  PW_CHECK(e.end - e.begin == bytes, ParseError,
           where << "/data_offsets: [" << e.begin << ", " << e.end << "] spans " << e.end - e.begin
                 << " bytes but " << dt << " "
                 << "shape needs " << bytes);
  return e;
}

const char* dtype_name(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return nullptr;
}

}  // namespace

std::map<std::string, at::Tensor> parse_safetensors(std::string_view bytes, const std::string& name,
                                                    std::map<std::string, std::string>* metadata) {
  PW_CHECK(bytes.size() >= 8, ParseError,
           name << ": not a safetensors file (" << bytes.size() << " bytes, shorter than the "
                << "8-byte header size)");
  std::uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) {
    header_len |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  PW_CHECK(header_len <= kMaxHeaderBytes && header_len <= bytes.size() - 8, ParseError,
           name << ": header size " << header_len << " exceeds the file (" << bytes.size() - 8
                << " bytes after the size field)");
  // The shared strict reader: duplicate keys and deep nesting are rejected too; line:column are
  // within the header.
  const Json header =
      json::parse_strict(bytes.substr(8, header_len), name + " (header)", {kMaxHeaderBytes, 8})
          .root;
  PW_CHECK(header.is_object(), ParseError, name << ": header must be a JSON object");

  const std::string_view data = bytes.substr(8 + header_len);
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      PW_CHECK(value.is_object() || value.is_null(), ParseError,
               name << ": /__metadata__: expected an object of strings");
      if (value.is_null()) continue;
      for (const auto& [mk, mv] : value.items()) {
        PW_CHECK(mv.is_string(), ParseError,
                 name << ": /__metadata__" << pointer(mk) << ": expected a string");
        if (metadata != nullptr) (*metadata)[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, key, value));
  }
  // The data must be covered exactly: sorted by offset, each tensor starts where the last ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  for (const Entry& e : entries) {
    PW_CHECK(e.begin == expected, ParseError,
             name << ": " << pointer(e.name) << "/data_offsets: starts at " << e.begin
                  << " but the previous tensor ends at " << expected
                  << (e.begin < expected ? " (overlap)" : " (gap)"));
    expected = e.end;
  }
  PW_CHECK(expected == data.size(), ParseError,
           name << ": the tensors cover " << expected << " data bytes but the file has "
                << data.size() << (expected > data.size() ? " (truncated)" : " (trailing bytes)"));

  std::map<std::string, at::Tensor> out;
  for (const Entry& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data.data() + e.begin, e.end - e.begin);
    out.emplace(e.name, std::move(t));
  }
  return out;
}

std::map<std::string, at::Tensor> load_safetensors(const std::string& path) {
  return parse_safetensors(read_file_bytes(path, "safetensors file"), path);
}

std::string serialize_safetensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::vector<at::Tensor> cpu;
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    PW_CHECK(!name.empty() && name != kMetadataKey, ConfigError,
             "safetensors: invalid tensor name '" << name << "'");
    PW_CHECK(seen.insert(name).second, ConfigError,
             "safetensors: tensor name '" << name << "' appears twice");
    PW_CHECK(tensor.defined(), ConfigError, "safetensors: tensor '" << name << "' is undefined");
    const char* dt = dtype_name(tensor.scalar_type());
    PW_CHECK(dt != nullptr, ConfigError,
             "safetensors: tensor '" << name << "' has unsupported dtype "
                                     << c10::toString(tensor.scalar_type()));
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.nbytes());
    header[name] = {
        {"dtype", dt}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    cpu.push_back(std::move(t));
  }
  std::string text = header.dump();
  // Pad with spaces so the data start 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + offset);
  for (const at::Tensor& t : cpu) {
    out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  return out;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata));
}

}  // namespace pipewright::exec
