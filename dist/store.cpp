// Stores: Store::wait, the TCPStore client (its server is store_server.cpp,
// its wire format store_protocol.h), FileStore and PrefixStore. Values are
// byte strings.
//
// TCPStore: one request then one reply per round trip. get() polls the server
// (with backoff) until the key exists or the timeout passes; rendezvous
// traffic is small, so polling keeps the server simple.
#include "minidl/dist/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "minidl/core/check.h"
#include "minidl/dist/store_protocol.h"
#include "minidl/dist/store_server.h"

namespace minidl::dist {

namespace {

namespace sp = store_protocol;
using Clock = std::chrono::steady_clock;

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
  return s + "]";
}

// Sleeps a little longer each round (1 ms up to 20 ms) while polling.
struct Backoff {
  Milliseconds delay{1};
  void sleep() {
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, Milliseconds(20));
  }
};

// Both fail on a closed connection, and with *timed_out set when the socket's
// SO_SNDTIMEO / SO_RCVTIMEO passed.
bool write_all(int fd, const void* data, size_t n, bool* timed_out) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) *timed_out = true;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n, bool* timed_out) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) *timed_out = true;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void append_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

int64_t parse_int(const std::string& s, const std::string& key) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  MINIDL_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), "Store::add: the value of key '",
               key, "' is not an integer: '", s, "'");
  return v;
}

const char* command_name(uint8_t command) {
  switch (command) {
    case sp::kSet: return "set";
    case sp::kGet: return "get";
    case sp::kAdd: return "add";
    case sp::kCheck: return "check";
    case sp::kDelete: return "delete_key";
    default: return "num_keys";
  }
}

}  // namespace

void Store::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  Backoff backoff;
  while (!check(keys)) {
    MINIDL_CHECK(Clock::now() < deadline, "Store::wait: timed out after ", timeout.count(),
                 " ms waiting for keys ", join_keys(keys));
    backoff.sleep();
  }
}

void store_based_barrier(Store& store, const std::string& name, int rank, int size, Milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto wait_for = [&](const std::string& key, int64_t count) {
    Backoff backoff;
    for (int64_t n = count; n < size; n = store.add(key, 0)) {
      MINIDL_CHECK(Clock::now() < deadline, "store_based_barrier '", name, "': timed out after ", timeout.count(),
                   " ms with ", n, " of ", size, " ranks arrived");
      backoff.sleep();
    }
  };
  wait_for(name + "/arrived", store.add(name + "/arrived", 1));
  // A second count, so that rank 0 leaves only after every other rank has
  // seen the first one complete (they poll the store until then).
  const int64_t left = store.add(name + "/left", 1);
  if (rank == 0) wait_for(name + "/left", left);
}

// ---- TCPStore --------------------------------------------------------------

namespace {

// Connects to host:port, retrying until the deadline (the master may not be
// listening yet).
// Says so on stderr after 10 s and every minute after: a node started
// before rank 0's (minidl-launch --nnodes 2) would otherwise wait in silence
// for the whole timeout.
int connect_with_retry(const std::string& host, int port, Milliseconds timeout) {
  const auto start = Clock::now(), deadline = start + timeout;
  auto next_report = start + std::chrono::seconds(10);
  Backoff backoff;
  std::string last_error = "no attempt";
  for (;;) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* a = res; a; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(res);
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          return fd;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    const auto now = Clock::now();
    MINIDL_CHECK(now < deadline, "TCPStore: could not connect to ", host, ":", port, " within ", timeout.count(),
                 " ms (", last_error, "); is rank 0 running and MASTER_ADDR/MASTER_PORT right?");
    if (now >= next_report) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
      std::fprintf(stderr, "minidl: TCPStore: still waiting for rank 0's store at %s:%d after %lld s (%s); "
                   "giving up after %lld s\n", host.c_str(), port, static_cast<long long>(waited),
                   last_error.c_str(), static_cast<long long>(timeout.count() / 1000));
      next_report = now + std::chrono::seconds(60);
    }
    backoff.sleep();
  }
}

}  // namespace

TCPStore::TCPStore(const std::string& host, int port, bool is_master, Milliseconds timeout)
    : Store(timeout), host_(host), port_(port) {
  MINIDL_CHECK(port >= 0 && port <= 65535, "TCPStore: port must be in [0, 65535], got ", port);
  MINIDL_CHECK(is_master || port > 0, "TCPStore: a client needs the master's port, got 0");
  if (is_master) {
    // Only on `host`, the address the other ranks connect to (MASTER_ADDR).
    server_ = std::make_unique<detail::TCPStoreServer>(host, port);
    port_ = server_->port();
  }
  socket_ = connect_with_retry(host, port_, timeout);
}

TCPStore::~TCPStore() {
  if (socket_ >= 0) ::close(socket_);
  server_.reset();
}

std::optional<std::string> TCPStore::request(uint8_t command, const std::string& key, const std::string& value) {
  const char* op = command_name(command);
  MINIDL_CHECK(key.size() <= sp::kMaxKeyBytes, "TCPStore::", op, ": the key is ", key.size(),
               " bytes long; the store takes keys of up to ", sp::kMaxKeyBytes, " bytes");
  MINIDL_CHECK(value.size() <= sp::kMaxValueBytes, "TCPStore::", op, "('", key, "'): the value is ", value.size(),
               " bytes long; the store takes values of up to ", sp::kMaxValueBytes, " bytes");
  const std::string out = sp::encode_request(command, key, value);
  std::lock_guard<std::mutex> lock(mutex_);
  MINIDL_CHECK(socket_ >= 0, "TCPStore::", op, "('", key, "'): the connection to the store at ", host_, ":", port_,
               " was lost earlier");
  // Every round trip is bounded by the store's timeout, as PyTorch's socket
  // timeouts: a store host that stopped answering (SIGSTOP, a debugger, a
  // network partition) would otherwise block this thread forever.
  if (const Milliseconds t = std::max(timeout(), Milliseconds(1)); t != socket_timeout_) {
    const timeval tv{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>(t.count() % 1000 * 1000)};
    ::setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(socket_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    socket_timeout_ = t;
  }
  uint8_t status = 0;
  uint32_t n = 0;
  std::string reply;
  bool timed_out = false;
  bool ok = write_all(socket_, out.data(), out.size(), &timed_out) && read_all(socket_, &status, 1, &timed_out) &&
            read_all(socket_, &n, 4, &timed_out) && n <= sp::kMaxValueBytes;
  if (ok) {
    reply.resize(n);
    ok = n == 0 || read_all(socket_, reply.data(), n, &timed_out);
  }
  if (!ok) {  // a late reply would answer the next request: the connection is done
    ::close(socket_);
    socket_ = -1;
  }
  MINIDL_CHECK(!timed_out, "TCPStore::", op, "('", key, "'): no reply from the store at ", host_, ":", port_,
               " within ", socket_timeout_.count(), " ms (is rank 0 stopped, or its machine unreachable?)");
  MINIDL_CHECK(ok, "TCPStore: lost the connection to the store at ", host_, ":", port_,
               " (did rank 0 exit or crash?)");
  MINIDL_CHECK(status != sp::kError, "TCPStore::", op, "('", key, "'): ", reply);
  if (status == sp::kMissing) return std::nullopt;
  return reply;
}

void TCPStore::set(const std::string& key, const std::string& value) { request(sp::kSet, key, value); }

std::string TCPStore::get(const std::string& key) {
  auto deadline = Clock::now() + timeout();
  Backoff backoff;
  for (;;) {
    if (auto reply = request(sp::kGet, key, "")) return *reply;
    MINIDL_CHECK(Clock::now() < deadline, "TCPStore::get: timed out after ", timeout().count(),
                 " ms waiting for key '", key, "'");
    backoff.sleep();
  }
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  return parse_int(request(sp::kAdd, key, std::to_string(delta)).value_or(""), key);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    if (!request(sp::kCheck, k, "")) return false;
  return true;
}

bool TCPStore::delete_key(const std::string& key) { return request(sp::kDelete, key, "").has_value(); }

int64_t TCPStore::num_keys() { return parse_int(request(sp::kNumKeys, "", "").value_or("0"), "num_keys"); }

// ---- FileStore -------------------------------------------------------------
// The whole map lives in one file: records of (u32 key length, key, u32 value
// length, value). Every operation locks the file (flock), reads it, and writes
// it back if it changed. The key "/num_closed" counts the processes that have
// closed the store; the one that brings it to world_size deletes the file.

namespace {
constexpr const char* kClosedKey = "/num_closed";

using FileMap = std::map<std::string, std::string>;

FileMap read_map(int fd, const std::string& path) {
  FileMap map;
  struct stat st {};
  ::fstat(fd, &st);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  MINIDL_CHECK(::pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()),
               "FileStore: cannot read ", path, ": ", std::strerror(errno));
  size_t pos = 0;
  auto take = [&](std::string& out) {
    uint32_t n = 0;
    MINIDL_CHECK(pos + 4 <= bytes.size(), "FileStore: ", path, " is corrupt at byte offset ", pos,
                 " (truncated record)");
    std::memcpy(&n, bytes.data() + pos, 4);
    MINIDL_CHECK(pos + 4 + n <= bytes.size(), "FileStore: ", path, " is corrupt at byte offset ", pos,
                 " (record of ", n, " bytes runs past the end of the file)");
    out.assign(bytes.data() + pos + 4, n);
    pos += 4 + n;
  };
  while (pos < bytes.size()) {
    std::string key, value;
    take(key);
    take(value);
    map[key] = std::move(value);
  }
  return map;
}

void write_map(int fd, const std::string& path, const FileMap& map) {
  std::string bytes;
  for (const auto& [k, v] : map) {
    append_u32(bytes, static_cast<uint32_t>(k.size()));
    bytes += k;
    append_u32(bytes, static_cast<uint32_t>(v.size()));
    bytes += v;
  }
  MINIDL_CHECK(::ftruncate(fd, 0) == 0 && ::pwrite(fd, bytes.data(), bytes.size(), 0) ==
                                              static_cast<ssize_t>(bytes.size()),
               "FileStore: cannot write ", path, ": ", std::strerror(errno));
}
}  // namespace

template <class Fn>
auto FileStore::locked(Fn&& fn) {
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MINIDL_CHECK(fd >= 0, "FileStore: cannot open ", path_, ": ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  } closer{fd};
  MINIDL_CHECK(::flock(fd, LOCK_EX) == 0, "FileStore: cannot lock ", path_, ": ", std::strerror(errno));
  FileMap map = read_map(fd, path_);
  FileMap before = map;
  auto result = fn(map);
  if (map != before) write_map(fd, path_, map);
  return result;
}

FileStore::FileStore(const std::string& path, int world_size, Milliseconds timeout)
    : Store(timeout), path_(path), world_size_(world_size) {
  MINIDL_CHECK(!path.empty(), "FileStore: the path is empty");
  locked([](FileMap&) { return 0; });  // creates the file, checks it parses
}

FileStore::~FileStore() {
  if (world_size_ < 1) return;
  try {
    bool last = locked([&](FileMap& map) {
      int64_t closed = map.count(kClosedKey) ? std::stoll(map[kClosedKey]) + 1 : 1;
      map[kClosedKey] = std::to_string(closed);
      return closed >= world_size_;
    });
    if (last) ::unlink(path_.c_str());
  } catch (const std::exception&) {
    // A destructor must not throw; a file left behind is harmless.
  }
}

void FileStore::set(const std::string& key, const std::string& value) {
  locked([&](FileMap& map) { return map[key] = value, 0; });
}

std::string FileStore::get(const std::string& key) {
  wait({key});
  return locked([&](FileMap& map) { return map.at(key); });
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  return locked([&](FileMap& map) {
    int64_t v = 0;
    MINIDL_CHECK(!__builtin_add_overflow(map.count(key) ? parse_int(map[key], key) : 0, delta, &v),
                 "Store::add: the value of key '", key, "' would overflow int64");
    map[key] = std::to_string(v);
    return v;
  });
}

bool FileStore::check(const std::vector<std::string>& keys) {
  return locked([&](FileMap& map) {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return map.count(k) > 0; });
  });
}

bool FileStore::delete_key(const std::string& key) {
  return locked([&](FileMap& map) { return map.erase(key) > 0; });
}

int64_t FileStore::num_keys() {
  return locked([&](FileMap& map) { return static_cast<int64_t>(map.size() - map.count(kClosedKey)); });
}

// ---- PrefixStore -----------------------------------------------------------

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : Store(store ? store->timeout() : kDefaultTimeout), prefix_(std::move(prefix)), store_(std::move(store)) {
  MINIDL_CHECK(store_ != nullptr, "PrefixStore: the underlying store is null");
}

void PrefixStore::set(const std::string& k, const std::string& value) { store_->set(key(k), value); }
std::string PrefixStore::get(const std::string& k) { return store_->get(key(k)); }
int64_t PrefixStore::add(const std::string& k, int64_t delta) { return store_->add(key(k), delta); }
bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(key(k));
  return store_->check(full);
}
bool PrefixStore::delete_key(const std::string& k) { return store_->delete_key(key(k)); }
int64_t PrefixStore::num_keys() { return store_->num_keys(); }
void PrefixStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(key(k));
  store_->wait(full, timeout);
}

}  // namespace minidl::dist
