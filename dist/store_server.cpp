// TCPStoreServer: poll() over the listening socket, a wake-up pipe and every
// client; requests are decoded from each client's buffer by store_protocol.
#include "minidl/dist/store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "minidl/core/check.h"

namespace minidl::dist::detail {

namespace sp = store_protocol;

namespace {

constexpr size_t kReadChunk = 64 * 1024;

// Binds and listens on the first address `host` resolves to that works.
int listen_on(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  MINIDL_CHECK(rc == 0, "TCPStore: cannot listen on ", host, ": cannot resolve it: ", gai_strerror(rc));
  int err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  MINIDL_FAIL("TCPStore: cannot listen on port ", port, " of ", host, ": ", std::strerror(err),
              err == EADDRINUSE ? " (is another job using MASTER_PORT?)"
              : err == EADDRNOTAVAIL
                  ? " (the store listens on MASTER_ADDR, which must be an address of rank 0's machine)"
                  : "");
}

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, int port) {
  listen_fd_ = listen_on(host, port);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    MINIDL_FAIL("TCPStore: pipe() failed: ", std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

TCPStoreServer::~TCPStoreServer() {
  char c = 0;
  (void)!::write(wake_[1], &c, 1);
  thread_.join();
  for (const Client& c : clients_) ::close(c.fd);
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TCPStoreServer::serve() {
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    // A client with a reply still to send is not read from until it takes it.
    for (const Client& c : clients_) fds.push_back({c.fd, short(c.out.empty() ? POLLIN : POLLOUT), 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) return;
    std::vector<bool> keep(clients_.size(), true);
    for (size_t i = 0; i < clients_.size(); ++i) {
      const short ev = fds[i + 2].revents;
      if (!ev) continue;
      Client& c = clients_[i];
      if (ev & (POLLERR | POLLNVAL)) keep[i] = false;
      else if (c.out.empty()) keep[i] = receive(c) && process(c);
      else keep[i] = flush(c) && process(c);
    }
    std::vector<Client> alive;
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (keep[i]) alive.push_back(std::move(clients_[i]));
      else ::close(clients_[i].fd);
    }
    clients_ = std::move(alive);
    if (fds[1].revents & POLLIN) accept_client();
  }
}

void TCPStoreServer::accept_client() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  if (clients_.size() >= sp::kMaxClients) {
    ::close(fd);
    return;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  clients_.push_back({fd, {}, {}});
}

bool TCPStoreServer::receive(Client& c) {
  char buf[kReadChunk];
  const ssize_t k = ::recv(c.fd, buf, sizeof(buf), 0);
  if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (k == 0) return false;  // closed, possibly in the middle of a request: it is dropped
  c.in.append(buf, static_cast<size_t>(k));
  return true;
}

// Answers the whole requests at the front of c.in, one at a time: the next is
// decoded only once the previous reply is sent, so c.out holds one reply at most.
bool TCPStoreServer::process(Client& c) {
  size_t pos = 0;
  sp::Request request;
  std::string error;
  bool ok = true;
  while (ok && c.out.empty()) {
    size_t used = 0;
    const sp::Decoded d = sp::decode_request(std::string_view(c.in).substr(pos), request, used, error);
    if (d == sp::Decoded::kNeedMore) break;
    if (d == sp::Decoded::kInvalid) return false;  // not a store client, or a broken one
    pos += used;
    c.out = map_.handle(request);
    ok = flush(c);
  }
  c.in.erase(0, pos);
  return ok;
}

bool TCPStoreServer::flush(Client& c) {
  while (!c.out.empty()) {
    const ssize_t k = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.out.erase(0, static_cast<size_t>(k));
  }
  return true;
}

}  // namespace minidl::dist::detail
