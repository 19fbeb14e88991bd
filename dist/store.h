// Key-value stores for rendezvous (PyTorch's c10d Store): processes meet by
// writing and reading keys. get() and wait() block until the key exists or the
// store's timeout expires, then throw a minidl::Error naming the keys.
//   TCPStore   one process (rank 0) hosts the data in a server thread; every
//              process, the host included, talks to it over TCP. Keys are at
//              most 4 KiB, values 16 MiB (store_protocol.h). A round trip
//              without a reply within the timeout fails, and so does every
//              later call on that client.
//   FileStore  a file on a shared filesystem, locked with flock; the last
//              process to close it deletes it, so the path can be reused.
//   PrefixStore  a namespace inside another store (one per process group).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace minidl::dist {

namespace detail {
class TCPStoreServer;
}

using Milliseconds = std::chrono::milliseconds;
// PyTorch's default_pg_timeout for both stores and collectives.
inline constexpr Milliseconds kDefaultTimeout{30 * 60 * 1000};

class Store {
 public:
  explicit Store(Milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists (or the timeout expires).
  virtual std::string get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at key (0 when absent) and
  // returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True when every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;
  // Blocks until every key exists; throws after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Milliseconds timeout);
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  Milliseconds timeout() const { return timeout_; }
  void set_timeout(Milliseconds timeout) { timeout_ = timeout; }

 private:
  Milliseconds timeout_;
};

// Returns once every rank of `size` has called it with the same `name`
// (PyTorch's _store_based_barrier), rank 0 last: the others are done with the
// store by then, so rank 0, which hosts a TCPStore's server, may exit at once.
// Throws after `timeout`, naming how many ranks arrived.
void store_based_barrier(Store& store, const std::string& name, int rank, int size, Milliseconds timeout);

class TCPStore : public Store {
 public:
  // is_master: host the server on `host`:`port` (0 picks a free port; see
  // port()). The server listens on that address only: 127.0.0.1 keeps the
  // store on this machine; a multi-node job's MASTER_ADDR must be an address
  // of rank 0's machine that the other nodes reach. Clients retry connecting
  // until the timeout, so start order does not matter.
  TCPStore(const std::string& host, int port, bool is_master, Milliseconds timeout = kDefaultTimeout);
  ~TCPStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  // One round trip; nullopt when the server answers "missing".
  std::optional<std::string> request(uint8_t command, const std::string& key, const std::string& value);

  std::string host_;
  int port_ = 0;
  std::unique_ptr<detail::TCPStoreServer> server_;  // only on the master
  int socket_ = -1;                // -1 once a round trip failed
  Milliseconds socket_timeout_{0};  // the send/receive timeout set on socket_
  std::mutex mutex_;                // one request at a time on the socket
};

class FileStore : public Store {
 public:
  // world_size: how many processes share the file (it is deleted when that
  // many have closed it); -1 leaves the file in place.
  FileStore(const std::string& path, int world_size = -1, Milliseconds timeout = kDefaultTimeout);
  ~FileStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& path() const { return path_; }

 private:
  template <class Fn>
  auto locked(Fn&& fn);  // runs fn(map) with the file locked, writing back changes

  std::string path_;
  int world_size_;
};

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  using Store::wait;

  const std::shared_ptr<Store>& underlying() const { return store_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace minidl::dist
