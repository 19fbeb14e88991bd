// TCPStore against clients that are not well-behaved store clients: garbage,
// lengths beyond the caps, a client that closes or stalls in the middle of a
// request, values over the caps, int64 overflow in add, and the server
// listening only on the address it was given. After each, the store still
// serves a normal client.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "minidl/dist/store.h"
#include "minidl/dist/store_protocol.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;
using namespace std::chrono_literals;
namespace sp = minidl::dist::store_protocol;

namespace {

// A raw TCP connection to 127.0.0.1:port.
struct RawClient {
  int fd = -1;
  explicit RawClient(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  }
  ~RawClient() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  void send(const std::string& bytes) const {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  }
  // True when the server has closed the connection (read returns 0 or an error within 2 s).
  bool closed_by_server() const {
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    return ::recv(fd, &c, 1, 0) <= 0 && errno != EAGAIN;
  }
};

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// The store still answers a normal client.
void check_alive(int port) {
  TCPStore client("127.0.0.1", port, false, 2s);
  client.set("alive", "yes");
  CHECK(client.get("alive") == "yes");
}

}  // namespace

TEST_CASE("TCPStore: garbage and oversized lengths close only that connection") {
  TCPStore master("127.0.0.1", 0, true, 2s);
  {
    RawClient c(master.port());
    c.send("GET / HTTP/1.1\r\n\r\n");  // not a command byte
    CHECK(c.closed_by_server());
  }
  {
    RawClient c(master.port());
    c.send(std::string(1, char(sp::kSet)) + u32(0xFFFFFFFF));  // a 4 GiB key: refused before any allocation
    CHECK(c.closed_by_server());
  }
  {
    RawClient c(master.port());
    c.send(std::string(1, char(sp::kSet)) + u32(1) + "k" + u32(sp::kMaxValueBytes + 1));
    CHECK(c.closed_by_server());
  }
  check_alive(master.port());
  CHECK(master.num_keys() == 1);  // nothing from the broken clients was stored
}

TEST_CASE("TCPStore: a client that closes or stalls mid-request does not hold up the others") {
  TCPStore master("127.0.0.1", 0, true, 2s);
  {
    RawClient c(master.port());
    c.send(std::string(1, char(sp::kSet)) + u32(3) + "key" + u32(100) + "only part of the value");
  }  // closed mid-request
  RawClient stalled(master.port());
  stalled.send(std::string(1, char(sp::kSet)) + u32(5) + "ke");  // and stays connected
  const auto start = std::chrono::steady_clock::now();
  check_alive(master.port());
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK_FALSE(master.check({"key"}));
  // The stalled client finishes its request later and gets its reply.
  stalled.send(std::string("y12") + u32(1) + "v");
  CHECK(master.get("key12") == "v");
}

TEST_CASE("TCPStore: caps and overflow are errors naming the operation") {
  TCPStore master("127.0.0.1", 0, true, 2s);
  CHECK_THROWS_CONTAINS(master.set(std::string(sp::kMaxKeyBytes + 1, 'k'), "v"), "keys of up to 4096 bytes");
  CHECK_THROWS_CONTAINS(master.set("big", std::string(sp::kMaxValueBytes + 1, 'v')), "values of up to 16777216");
  master.set("max", std::to_string(INT64_MAX));
  CHECK_THROWS_CONTAINS(master.add("max", 1), "would overflow int64");
  master.set("spaced", " 12");
  CHECK_THROWS_CONTAINS(master.add("spaced", 1), "not an integer");
  CHECK(master.add("fresh", -3) == -3);
  check_alive(master.port());
}

TEST_CASE("TCPStore: the server listens on the given address only") {
  TCPStore master("127.0.0.1", 0, true, 2s);
  // Another address of this machine, if it has one, must not reach the store.
  ifaddrs* ifs = nullptr;
  REQUIRE(::getifaddrs(&ifs) == 0);
  std::string other;
  for (ifaddrs* i = ifs; i && other.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* a = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    other = ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
  }
  ::freeifaddrs(ifs);
  if (other.empty()) {
    MESSAGE("no non-loopback IPv4 address on this machine; only the loopback case is checked");
  } else {
    CHECK_THROWS_CONTAINS(TCPStore(other, master.port(), false, 200ms), "could not connect to " + other);
  }
  check_alive(master.port());
  // An address that is not this machine's is refused with a hint.
  CHECK_THROWS_CONTAINS(TCPStore("192.0.2.1", 0, true, 1s), "must be an address of rank 0's machine");
}
