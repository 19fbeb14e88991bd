// The TCPStore server's side of the wire protocol: what one or more clients
// send (any bytes at all, in any pieces) is decoded and applied to the map
// exactly as store_server.cpp does per connection. The first byte picks the
// number of clients (1-4) and how the rest is cut into reads.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "minidl/dist/store_protocol.h"

namespace sp = minidl::dist::store_protocol;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

struct Client {
  std::string in;
  bool closed = false;
};

// store_server.cpp's process(): whole requests only, one reply each.
void process(Client& c, sp::StoreMap& map) {
  size_t pos = 0;
  sp::Request request;
  std::string error;
  for (;;) {
    size_t used = 0;
    const sp::Decoded d = sp::decode_request(std::string_view(c.in).substr(pos), request, used, error);
    if (d == sp::Decoded::kNeedMore) break;
    if (d == sp::Decoded::kInvalid) {
      require(!error.empty());
      c.closed = true;  // the server closes the connection
      return;
    }
    require(used > 0 && pos + used <= c.in.size());
    pos += used;
    const std::string reply = map.handle(request);
    sp::Status status;
    std::string payload;
    size_t reply_used = 0;
    require(sp::decode_reply(reply, status, payload, reply_used) && reply_used == reply.size());
    require(map.stored_bytes() <= sp::kMaxStoredBytes);
  }
  c.in.erase(0, pos);
  // What is left is the start of one request, so at most one request long.
  require(c.in.size() < sp::kMaxRequestBytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    if (bytes.empty()) return;
    const auto control = static_cast<uint8_t>(bytes[0]);
    const size_t clients = 1 + (control & 3);
    const size_t piece = 1 + (control >> 2);  // bytes per read: 1..64
    bytes.remove_prefix(1);
    sp::StoreMap map;
    std::vector<Client> cs(clients);
    for (size_t i = 0, k = 0; i < bytes.size(); i += piece, k = (k + 1) % clients) {
      Client& c = cs[k];
      if (c.closed) continue;
      c.in.append(bytes.substr(i, piece));
      process(c, map);
    }
  });
}
