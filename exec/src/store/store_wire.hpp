// The TCP store's wire format (Note [Store protocol] in tcp_store_server.cpp), shared by the
// server and the client. Private to exec/.
//
// Every message is a frame: a 4-byte little-endian payload length, then the payload. Requests
// start with an Op byte; fields are strings (4-byte length + bytes) and 8-byte integers, all
// little-endian. Every request gets one reply frame.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipewright::exec::wire {

inline constexpr std::string_view kMagic = "pipewright-store/1";
// The largest frame either side accepts: the store holds rendezvous keys (addresses, ids,
// fingerprints), never tensors.
inline constexpr std::uint32_t kMaxFrameBytes = 16u << 20;

enum class Op : std::uint8_t {
  kHello = 1,  // magic, job id, world size, fingerprint, rank -> status, message
  kSet = 2,    // key, value -> (empty)
  kGet = 3,    // key -> found (1 byte), value
  kAdd = 4,    // key, delta -> new value
  kCheck = 5,  // n, keys... -> all present (1 byte)
  kErase = 6,  // key -> existed (1 byte)
  kStale = 7,  // threshold ms -> n, ranks... (accepted ranks silent for longer, or gone)
  kPing = 8,   // -> n, ranks... (the ranks gone so far)
  kBye = 9,    // -> (empty); a clean close: the rank is not reported gone
};

// Hello replies.
enum class Status : std::uint8_t { kAccepted = 0, kRefused = 1 };

class Writer {
 public:
  Writer& u8(std::uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i64(std::int64_t v) {
    auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& str(std::string_view s) {
    const auto n = static_cast<std::uint32_t>(s.size());
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out_.append(s.data(), s.size());
    return *this;
  }
  // The frame: length prefix + payload.
  [[nodiscard]] std::string frame() const {
    std::string f;
    const auto n = static_cast<std::uint32_t>(out_.size());
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    return f + out_;
  }

 private:
  std::string out_;
};

// Reads fields from one payload (a view: the payload must outlive the Reader); ok() turns false
// on a short or malformed payload.
class Reader {
 public:
  explicit Reader(std::string_view payload) : in_(payload) {}
  std::uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(in_[pos_++]);
  }
  std::int64_t i64() {
    if (!need(8)) return 0;
    std::uint64_t u = 0;
    for (int i = 0; i < 8; ++i)
      u |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(in_[pos_++])) << (8 * i);
    return static_cast<std::int64_t>(u);
  }
  std::string str() {
    if (!need(4)) return {};
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(in_[pos_++])) << (8 * i);
    if (!need(n)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  [[nodiscard]] bool ok() const { return ok_; }

 private:
  bool need(std::size_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

// The length of a complete frame at the start of `buf` (prefix included), 0 if incomplete, or
// -1 if the announced length exceeds kMaxFrameBytes.
inline std::int64_t complete_frame(std::string_view buf) {
  if (buf.size() < 4) return 0;
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i)
    n |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(buf[static_cast<std::size_t>(i)]))
         << (8 * i);
  if (n > kMaxFrameBytes) return -1;
  return buf.size() >= 4 + static_cast<std::size_t>(n) ? 4 + static_cast<std::int64_t>(n) : 0;
}

// Sends all of `data` (MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE). False on error.
inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace pipewright::exec::wire
