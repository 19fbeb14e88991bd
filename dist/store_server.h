// The TCPStore's server: rank 0 hosts the key-value map in one thread that
// serves every client's connection (the other ranks', and rank 0's own).
// Sockets are non-blocking and each client has its own input and output
// buffer, so a client that sends half a request and stalls, sends garbage,
// or stops reading its replies holds up only itself; see store_protocol.h
// for the caps that bound what one client can make the server allocate.
#pragma once

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "minidl/dist/store_protocol.h"

namespace minidl::dist::detail {

class TCPStoreServer {
 public:
  // Listens on `host`:`port` only (port 0 picks a free one, see port()):
  // the address clients are told to connect to, e.g. 127.0.0.1 for a job on
  // one machine, so the store is not reachable from elsewhere.
  TCPStoreServer(const std::string& host, int port);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Client {
    int fd = -1;
    std::string in, out;  // unparsed request bytes; reply bytes not yet sent
  };

  void serve();
  void accept_client();
  bool receive(Client& c);  // false: the client is gone or misbehaved
  bool process(Client& c);
  bool flush(Client& c);

  int listen_fd_ = -1, port_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<Client> clients_;
  store_protocol::StoreMap map_;
  std::thread thread_;
};

}  // namespace minidl::dist::detail
