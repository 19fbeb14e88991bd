// The TCPStore wire protocol and the server's key-value map, as plain
// functions on bytes: the server thread (store.cpp) feeds them what it reads
// from each socket, and fuzz/fuzz_store.cpp feeds them arbitrary bytes.
//
//   request  u8 command, u32 key length, key, u32 value length, value
//   reply    u8 status, u32 length, payload
// Lengths are little-endian. Status: 0 ok, 1 missing (get/check/delete of an
// absent key), 2 error (the payload says why: add on a non-integer, the store
// is full).
//
// Anyone who can reach the port can send anything, so every length is capped
// before anything is allocated for it, and the map's total size is capped;
// a request beyond the caps closes that client's connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace minidl::dist::store_protocol {

// Keys are short names ("default_pg/arrived/12/3"); values are addresses,
// NCCL ids and counters (bytes to a few KB per rank).
inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxValueBytes = 16u << 20;     // 16 MiB
inline constexpr size_t kMaxStoredBytes = size_t(1) << 30;  // keys + values held, 1 GiB
inline constexpr size_t kMaxClients = 1024;                 // more connections are closed at once
// The longest request: a client's unread input never exceeds this plus one read.
inline constexpr size_t kMaxRequestBytes = 1 + 4 + kMaxKeyBytes + 4 + kMaxValueBytes;

enum Command : uint8_t { kSet = 1, kGet, kAdd, kCheck, kDelete, kNumKeys };
enum Status : uint8_t { kOk = 0, kMissing = 1, kError = 2 };

struct Request {
  uint8_t command = 0;
  std::string key, value;
};

enum class Decoded { kRequest, kNeedMore, kInvalid };

// Decodes the request at the front of `bytes`. kRequest: `out` holds it and
// `consumed` its length. kNeedMore: the bytes are a valid beginning. kInvalid:
// an unknown command or a length beyond the caps; `error` says which.
Decoded decode_request(std::string_view bytes, Request& out, size_t& consumed, std::string& error);

std::string encode_request(uint8_t command, std::string_view key, std::string_view value);
std::string encode_reply(Status status, std::string_view payload);

// A reply decoded by the client; false when `bytes` do not start with a whole one.
bool decode_reply(std::string_view bytes, Status& status, std::string& payload, size_t& consumed);

// The server's map and what each command does to it.
class StoreMap {
 public:
  // The encoded reply to `request` (a decoded, hence valid, request).
  std::string handle(const Request& request);

  size_t stored_bytes() const { return stored_bytes_; }
  size_t size() const { return data_.size(); }

 private:
  std::string set(const std::string& key, std::string value);
  std::map<std::string, std::string> data_;
  size_t stored_bytes_ = 0;
};

}  // namespace minidl::dist::store_protocol
