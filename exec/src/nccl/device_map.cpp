#include "pipewright/exec/device_map.hpp"

#include <cctype>
#include <cstddef>
#include <limits>
#include <optional>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

struct Token {
  std::string text;
  std::size_t column = 1;  // 1-based column of the token's first character in the spec
};

// Splits on `sep`, trimming blanks around each token; keeps empty tokens (they are errors).
std::vector<Token> split(const std::string& s, char sep, std::size_t base_column) {
  std::vector<Token> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = s.find(sep, start);
    std::string piece = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::size_t lead = 0;
    while (lead < piece.size() && std::isspace(static_cast<unsigned char>(piece[lead]))) ++lead;
    std::size_t trail = piece.size();
    while (trail > lead && std::isspace(static_cast<unsigned char>(piece[trail - 1]))) --trail;
    out.push_back({piece.substr(lead, trail - lead), base_column + start + lead});
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

int parse_index(const std::string& spec, const Token& tok, const char* what) {
  PW_CHECK(!tok.text.empty(), ConfigError,
           "--device-map '" << spec << "': empty " << what << " at column " << tok.column);
  long long value = 0;
  for (char c : tok.text) {
    PW_CHECK(std::isdigit(static_cast<unsigned char>(c)), ConfigError,
             "--device-map '" << spec << "': " << what << " '" << tok.text << "' at column "
                              << tok.column << " is not a non-negative integer");
    value = value * 10 + (c - '0');
    PW_CHECK(value <= std::numeric_limits<int>::max(), ConfigError,
             "--device-map '" << spec << "': " << what << " '" << tok.text << "' at column "
                              << tok.column << " is too large");
  }
  return static_cast<int>(value);
}

}  // namespace

std::vector<int> parse_device_map(const std::string& spec, int local_world_size) {
  PW_CHECK(local_world_size >= 1, ConfigError,
           "local world size must be >= 1, got " << local_world_size);
  std::vector<int> devices(static_cast<std::size_t>(local_world_size));
  if (spec.find_first_not_of(" \t") == std::string::npos) {
    for (int r = 0; r < local_world_size; ++r) devices[static_cast<std::size_t>(r)] = r;
    return devices;
  }

  const std::vector<Token> entries = split(spec, ',', 1);
  const bool pairs = spec.find(':') != std::string::npos;
  std::vector<std::optional<Token>> seen(devices.size());
  if (pairs) {
    for (const Token& entry : entries) {
      PW_CHECK(entry.text.find(':') != std::string::npos, ConfigError,
               "--device-map '" << spec << "': entry '" << entry.text << "' at column "
                                << entry.column
                                << " is not local_rank:device (do not mix the list and pair "
                                   "forms)");
      const std::vector<Token> parts = split(entry.text, ':', entry.column);
      PW_CHECK(parts.size() == 2, ConfigError,
               "--device-map '" << spec << "': entry '" << entry.text << "' at column "
                                << entry.column << " has more than one ':'");
      const int local_rank = parse_index(spec, parts[0], "local rank");
      const int device = parse_index(spec, parts[1], "device");
      PW_CHECK(local_rank < local_world_size, ConfigError,
               "--device-map '" << spec << "': local rank " << local_rank << " at column "
                                << parts[0].column << " is out of range; this node has "
                                << local_world_size << " local ranks (0.." << local_world_size - 1
                                << ")");
      auto& slot = seen[static_cast<std::size_t>(local_rank)];
      PW_CHECK(!slot.has_value(), ConfigError,
               "--device-map '" << spec << "': local rank " << local_rank
                                << " is listed twice (columns " << slot->column << " and "
                                << parts[0].column << ")");
      slot = parts[0];
      devices[static_cast<std::size_t>(local_rank)] = device;
    }
    for (int r = 0; r < local_world_size; ++r) {
      PW_CHECK(seen[static_cast<std::size_t>(r)].has_value(), ConfigError,
               "--device-map '" << spec << "': local rank " << r << " has no device (each of the "
                                << local_world_size << " local ranks needs a local_rank:device "
                                << "pair)");
    }
  } else {
    PW_CHECK(entries.size() == devices.size(), ConfigError,
             "--device-map '" << spec << "' lists " << entries.size()
                              << " devices but this node has " << local_world_size
                              << " local ranks (one device per local rank)");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      devices[i] = parse_index(spec, entries[i], "device");
    }
  }

  for (std::size_t a = 0; a < devices.size(); ++a) {
    for (std::size_t b = a + 1; b < devices.size(); ++b) {
      PW_CHECK(devices[a] != devices[b], ConfigError,
               "--device-map '" << spec << "': local ranks " << a << " and " << b
                                << " both use CUDA device " << devices[a]
                                << " (NCCL needs one device per rank)");
    }
  }
  return devices;
}

int resolve_device(const std::vector<int>& device_map, int local_rank, int local_world_size,
                   int device_count, const std::string& count_detail) {
  PW_CHECK(
      local_rank >= 0 && local_rank < local_world_size, ConfigError,
      "local rank " << local_rank << " is out of range for a local world of " << local_world_size);
  if (!device_map.empty()) {
    // The map's own problems (size, negative or shared devices) come first: they do not depend
    // on the machine.
    std::ostringstream text;
    for (std::size_t i = 0; i < device_map.size(); ++i) text << (i ? "," : "") << device_map[i];
    (void)parse_device_map(text.str(), local_world_size);
  }
  const std::string detail = count_detail.empty() ? "" : " (" + count_detail + ")";
  // Local ranks need distinct devices, with or without a map.
  PW_CHECK(device_count >= local_world_size, ConfigError,
           "--backend nccl needs "
               << local_world_size << " CUDA device" << (local_world_size == 1 ? "" : "s")
               << " on this node for " << local_world_size << " local rank"
               << (local_world_size == 1 ? "" : "s") << "; found " << device_count << detail);
  if (device_map.empty()) return local_rank;
  // Every rank checks the whole map, so that all of them fail alike on a bad one.
  for (std::size_t r = 0; r < device_map.size(); ++r) {
    PW_CHECK(device_map[r] < device_count, ConfigError,
             "--device-map maps local rank " << r << " to CUDA device " << device_map[r]
                                             << "; this node has " << device_count << " (0.."
                                             << device_count - 1 << ")");
  }
  return device_map[static_cast<std::size_t>(local_rank)];
}

int resolve_device(const std::string& spec, int local_rank, int local_world_size, int device_count,
                   const std::string& count_detail) {
  PW_CHECK(
      local_rank >= 0 && local_rank < local_world_size, ConfigError,
      "local rank " << local_rank << " is out of range for a local world of " << local_world_size);
  const bool identity = spec.find_first_not_of(" \t") == std::string::npos;
  return resolve_device(identity ? std::vector<int>{} : parse_device_map(spec, local_world_size),
                        local_rank, local_world_size, device_count, count_detail);
}

}  // namespace pipewright::exec
