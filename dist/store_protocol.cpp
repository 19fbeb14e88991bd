// TCPStore requests and replies <-> bytes, and the server's map.
#include "minidl/dist/store_protocol.h"

#include <charconv>
#include <cstring>

namespace minidl::dist::store_protocol {

namespace {

uint32_t load_u32(const char* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, 4);  // little-endian hosts only, as the client writes it
  return v;
}

void append_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

// Reads the u32-prefixed string at `pos`: 1 done, 0 need more bytes, -1 over `cap`.
int take(std::string_view bytes, size_t& pos, uint32_t cap, std::string_view& out) {
  if (bytes.size() - pos < 4) return 0;
  const uint32_t n = load_u32(bytes.data() + pos);
  if (n > cap) return -1;
  if (bytes.size() - pos - 4 < n) return 0;
  out = bytes.substr(pos + 4, n);
  pos += 4 + n;
  return 1;
}

// A whole decimal int64 ("-12"), nothing else: no spaces, no "+", no overflow.
bool parse_int64(std::string_view s, int64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

}  // namespace

Decoded decode_request(std::string_view bytes, Request& out, size_t& consumed, std::string& error) {
  if (bytes.empty()) return Decoded::kNeedMore;
  const auto command = static_cast<uint8_t>(bytes[0]);
  if (command < kSet || command > kNumKeys) {
    error = "unknown command " + std::to_string(command);
    return Decoded::kInvalid;
  }
  size_t pos = 1;
  std::string_view key, value;
  int got = take(bytes, pos, kMaxKeyBytes, key);
  if (got < 0) {
    error = "key longer than " + std::to_string(kMaxKeyBytes) + " bytes";
    return Decoded::kInvalid;
  }
  if (got == 0) return Decoded::kNeedMore;
  got = take(bytes, pos, kMaxValueBytes, value);
  if (got < 0) {
    error = "value longer than " + std::to_string(kMaxValueBytes) + " bytes";
    return Decoded::kInvalid;
  }
  if (got == 0) return Decoded::kNeedMore;
  out.command = command;
  out.key.assign(key);
  out.value.assign(value);
  consumed = pos;
  return Decoded::kRequest;
}

std::string encode_request(uint8_t command, std::string_view key, std::string_view value) {
  std::string out(1, static_cast<char>(command));
  append_u32(out, static_cast<uint32_t>(key.size()));
  out += key;
  append_u32(out, static_cast<uint32_t>(value.size()));
  out += value;
  return out;
}

std::string encode_reply(Status status, std::string_view payload) {
  std::string out(1, static_cast<char>(status));
  append_u32(out, static_cast<uint32_t>(payload.size()));
  out += payload;
  return out;
}

bool decode_reply(std::string_view bytes, Status& status, std::string& payload, size_t& consumed) {
  if (bytes.empty()) return false;
  size_t pos = 1;
  std::string_view p;
  if (take(bytes, pos, kMaxValueBytes, p) != 1) return false;
  status = static_cast<Status>(bytes[0]);
  payload.assign(p);
  consumed = pos;
  return true;
}

std::string StoreMap::set(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t now = key.size() + value.size();
  if (stored_bytes_ - old + now > kMaxStoredBytes)
    return encode_reply(kError, "the store is full (it holds " + std::to_string(stored_bytes_) +
                                    " bytes of keys and values; the limit is " +
                                    std::to_string(kMaxStoredBytes) + ")");
  stored_bytes_ = stored_bytes_ - old + now;
  data_[key] = std::move(value);
  return encode_reply(kOk, "");
}

std::string StoreMap::handle(const Request& r) {
  switch (r.command) {
    case kSet: return set(r.key, r.value);
    case kGet: {
      auto it = data_.find(r.key);
      return it == data_.end() ? encode_reply(kMissing, "") : encode_reply(kOk, it->second);
    }
    case kAdd: {
      auto it = data_.find(r.key);
      int64_t current = 0, delta = 0, sum = 0;
      if (it != data_.end() && !parse_int64(it->second, current))
        return encode_reply(kError, "the value of key '" + r.key + "' is not an integer");
      if (!parse_int64(r.value, delta)) return encode_reply(kError, "the delta is not an integer");
      if (__builtin_add_overflow(current, delta, &sum))
        return encode_reply(kError, "the value of key '" + r.key + "' would overflow int64");
      std::string text = std::to_string(sum);
      std::string reply = set(r.key, text);
      return reply[0] == kOk ? encode_reply(kOk, text) : reply;
    }
    case kCheck: return encode_reply(data_.count(r.key) ? kOk : kMissing, "");
    case kDelete: {
      auto it = data_.find(r.key);
      if (it == data_.end()) return encode_reply(kMissing, "");
      stored_bytes_ -= it->first.size() + it->second.size();
      data_.erase(it);
      return encode_reply(kOk, "");
    }
    case kNumKeys: return encode_reply(kOk, std::to_string(data_.size()));
  }
  return encode_reply(kError, "unknown command " + std::to_string(r.command));
}

}  // namespace minidl::dist::store_protocol
