// init_process_group and the default group: parses the init method, builds
// the store (TCP hosted by rank 0, or a file), and the gloo or (CUDA builds)
// nccl group on it; new_group makes groups of the same backend.
#include "minidl/dist/distributed.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "minidl/core/check.h"
#include "minidl/dist/collective_check.h"
#include "minidl/dist/nccl_host/nccl_checks.h"
#include "minidl/dist/non_group_member.h"
#include "minidl/dist/process_group_gloo.h"
#ifdef MINIDL_WITH_CUDA
#include "minidl/dist/nccl/make_process_group_nccl.h"
#endif

namespace minidl::dist {

namespace {

struct DefaultGroup {
  std::shared_ptr<Store> store;       // the rendezvous store (TCP or file)
  ProcessGroupPtr group;
  std::string host;                    // the address peers dial for this process
  std::string backend;                 // "gloo" or "nccl"
  int64_t groups_created = 0;          // new_group calls so far (same on every rank)
  // The default group's ranks of each new_group this process is in (group
  // rank i is members[i]), for the calls that take a global rank (broadcast).
  std::vector<std::pair<std::weak_ptr<ProcessGroup>, std::vector<int>>> subgroups;
};
DefaultGroup& state() {
  static DefaultGroup s;
  return s;
}

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  MINIDL_CHECK(v && *v, "Error initializing minidl::dist using env:// rendezvous: environment variable ", name,
               " expected, but not set");
  return v;
}

int to_int(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    int v = std::stoi(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  MINIDL_FAIL("init_process_group: ", what, " must be an integer, got '", s, "'");
}

// "host:port?rank=1&world_size=4" -> path "host:port", query map.
struct Url {
  std::string path;
  std::map<std::string, std::string> query;
};
Url parse_query(std::string rest, Url url) {
  if (auto q = rest.find('?'); q != std::string::npos) {
    std::string query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    size_t pos = 0;
    while (pos <= query.size()) {
      size_t amp = query.find('&', pos);
      std::string item = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
      if (auto eq = item.find('='); eq != std::string::npos) url.query[item.substr(0, eq)] = item.substr(eq + 1);
      if (amp == std::string::npos) break;
      pos = amp + 1;
    }
  }
  url.path = rest;
  return url;
}

// "host:port" or "[ipv6]:port" (as in a URL; tcp://[::1]:29500) -> host, port.
std::pair<std::string, int> split_host_port(const std::string& s, const std::string& init_method) {
  std::string host, rest;
  if (!s.empty() && s[0] == '[') {
    const auto close = s.find(']');
    MINIDL_CHECK(close != std::string::npos,
                 "init_process_group: tcp:// rendezvous: no ']' after the IPv6 address in '", init_method, "'");
    host = s.substr(1, close - 1), rest = s.substr(close + 1);
  } else {
    const auto colon = s.find(':');
    host = s.substr(0, colon), rest = colon == std::string::npos ? "" : s.substr(colon);
    MINIDL_CHECK(rest.find(':', 1) == std::string::npos, "init_process_group: tcp:// rendezvous: an IPv6 address ",
                 "needs brackets, as tcp://[::1]:29500, got '", init_method, "'");
  }
  MINIDL_CHECK(rest.size() > 1 && rest[0] == ':', "init_process_group: tcp:// rendezvous: port number missing in '",
               init_method, "'");
  MINIDL_CHECK(!host.empty(), "init_process_group: tcp:// rendezvous: host missing in '", init_method, "'");
  return {host, to_int(rest.substr(1), "port")};
}

// MASTER_ADDR as getaddrinfo takes it: an IPv6 address also in brackets.
std::string strip_brackets(const std::string& addr) {
  return addr.size() > 2 && addr.front() == '[' && addr.back() == ']' ? addr.substr(1, addr.size() - 2) : addr;
}

// The local address that routes to `master` (what the peers should dial), of
// the master's address family: 127.0.0.1 or ::1 when the master is on this
// machine's loopback; 127.0.0.1 when the master does not resolve.
std::string local_address_towards(const std::string& master) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(master.c_str(), "9", &hints, &res) != 0 || !res) return "127.0.0.1";
  std::string result = res->ai_family == AF_INET6 ? "::1" : "127.0.0.1";
  int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {  // UDP connect sends nothing
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char buf[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* addr = local.ss_family == AF_INET6
                             ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
                             : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, buf, sizeof(buf))) result = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return result;
}

ProcessGroupPtr make_backend_group(const std::string& backend, std::shared_ptr<Store> store, int rank, int size,
                                   Milliseconds timeout, const std::string& host) {
  if (backend == "nccl") {
#ifdef MINIDL_WITH_CUDA
    return make_process_group_nccl(std::move(store), rank, size, timeout);
#else
    MINIDL_FAIL(nccl::unavailable_in_cpu_build_message());
#endif
  }
  return std::make_shared<ProcessGroupGloo>(std::move(store), rank, size, timeout, host);
}

// The backend's group, its collectives checked across ranks first under
// MINIDL_DISTRIBUTED_DEBUG=DETAIL (dist/collective_check.h).
ProcessGroupPtr make_group(const std::string& backend, const std::shared_ptr<Store>& store, int rank, int size,
                           Milliseconds timeout, const std::string& host) {
  ProcessGroupPtr group = make_backend_group(backend, store, rank, size, timeout, host);
  if (!collective_checks_enabled()) return group;
  return make_checked_group(std::move(group), std::make_shared<PrefixStore>("collective_check", store));
}

ProcessGroupPtr group_or_default(const ProcessGroupPtr& group, const char* op) {
  if (group) return group;
  MINIDL_CHECK(state().group != nullptr, op,
               ": Default process group has not been initialized, please make sure to call init_process_group.");
  return state().group;
}

}  // namespace

void init_process_group(const std::string& backend, const std::string& init_method, int world_size, int rank,
                        Milliseconds timeout) {
  MINIDL_CHECK(state().group == nullptr, "init_process_group: trying to initialize the default process group twice!");
#ifndef MINIDL_WITH_CUDA
  if (backend == "nccl") MINIDL_FAIL(nccl::unavailable_in_cpu_build_message());
#endif
  MINIDL_CHECK(backend == "gloo" || backend == "nccl", "init_process_group: unknown backend '", backend,
               "' (expected 'gloo' or 'nccl')");
  MINIDL_CHECK(timeout.count() > 0, "init_process_group: the timeout must be positive, got ", timeout.count(), " ms");

  std::shared_ptr<Store> store;
  std::string host = "127.0.0.1";
  // A rank or world size that was given (a query or an environment variable)
  // but is out of range: said so, not taken for a missing one.
  auto given = [](int value, const char* name, int least) {
    MINIDL_CHECK(value >= least, "init_process_group: ", name, " must be >= ", least, ", got ", value);
    return value;
  };
  auto resolve_rank = [&](const Url& url, const char* scheme) {
    if (rank < 0 && url.query.count("rank")) rank = given(to_int(url.query.at("rank"), "rank"), "rank", 0);
    if (world_size < 0 && url.query.count("world_size"))
      world_size = given(to_int(url.query.at("world_size"), "world_size"), "world_size", 1);
    MINIDL_CHECK(rank >= 0, "init_process_group: ", scheme, " rendezvous: rank parameter missing");
    MINIDL_CHECK(world_size >= 0, "init_process_group: ", scheme, " rendezvous: world_size parameter missing");
    given(world_size, "world_size", 1);
  };
  auto tcp_store = [&](const std::string& addr, int port) {
    MINIDL_CHECK(port > 0 && port <= 65535, "init_process_group: port must be in [1, 65535], got ", port);
    host = local_address_towards(addr);
    return std::make_shared<TCPStore>(addr, port, rank == 0, timeout);
  };

  if (init_method.rfind("env://", 0) == 0) {
    Url url = parse_query(init_method.substr(6), Url{});
    if (rank < 0 && !url.query.count("rank")) rank = given(to_int(env_or_fail("RANK"), "RANK"), "RANK", 0);
    if (world_size < 0 && !url.query.count("world_size"))
      world_size = given(to_int(env_or_fail("WORLD_SIZE"), "WORLD_SIZE"), "WORLD_SIZE", 1);
    resolve_rank(url, "env://");
    std::string addr = strip_brackets(env_or_fail("MASTER_ADDR"));
    int port = to_int(env_or_fail("MASTER_PORT"), "MASTER_PORT");
    MINIDL_CHECK(rank < world_size, "init_process_group: RANK ", rank, " must be below WORLD_SIZE ", world_size);
    store = tcp_store(addr, port);
  } else if (init_method.rfind("tcp://", 0) == 0) {
    Url url = parse_query(init_method.substr(6), Url{});
    const auto [addr, port] = split_host_port(url.path, init_method);
    resolve_rank(url, "tcp://");
    MINIDL_CHECK(rank < world_size, "init_process_group: rank ", rank, " must be below world_size ", world_size);
    store = tcp_store(addr, port);
  } else if (init_method.rfind("file://", 0) == 0) {
    Url url = parse_query(init_method.substr(7), Url{});
    MINIDL_CHECK(!url.path.empty(), "init_process_group: file:// rendezvous: the path is empty");
    resolve_rank(url, "file://");
    MINIDL_CHECK(rank < world_size, "init_process_group: rank ", rank, " must be below world_size ", world_size);
    store = std::make_shared<FileStore>(url.path, world_size, timeout);
  } else {
    MINIDL_FAIL("init_process_group: unknown init_method '", init_method,
                "' (expected env://, tcp://host:port or file:///path)");
  }

  auto pg_store = std::make_shared<PrefixStore>("default_pg", store);
  state().group = make_group(backend, pg_store, rank, world_size, timeout, host);
  state().store = store;
  state().host = host;
  state().backend = backend;
  state().groups_created = 0;
}

bool is_initialized() { return state().group != nullptr; }

void destroy_process_group() {
  // PyTorch raises here too (a mistaken teardown order, not a no-op).
  group_or_default(nullptr, "destroy_process_group");
  // The group first (its threads finish what is queued), then the store.
  state().group.reset();
  state().store.reset();
  state().groups_created = 0;
  state().subgroups.clear();
}

ProcessGroupPtr default_group() { return group_or_default(nullptr, "default_group"); }

std::shared_ptr<Store> default_store() {
  MINIDL_CHECK(state().store != nullptr,
               "default_store: Default process group has not been initialized, please make sure to call "
               "init_process_group.");
  return state().store;
}

int get_rank(const ProcessGroupPtr& group) {
  if (group) return group->rank();
  return state().group ? state().group->rank() : -1;
}

int get_world_size(const ProcessGroupPtr& group) {
  if (group) return group->size();
  return state().group ? state().group->size() : -1;
}

ProcessGroupPtr new_group(const std::vector<int>& ranks, Milliseconds timeout) {
  auto world = group_or_default(nullptr, "new_group");
  std::vector<int> members = ranks;
  if (members.empty())
    for (int r = 0; r < world->size(); ++r) members.push_back(r);
  int my_index = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    MINIDL_CHECK(members[i] >= 0 && members[i] < world->size(), "new_group: rank ", members[i],
                 " is not in the default group of size ", world->size());
    for (size_t j = 0; j < i; ++j)
      MINIDL_CHECK(members[j] != members[i], "new_group: rank ", members[i], " is listed twice");
  }
  // Group ranks follow the sorted global ranks (as PyTorch), so ranks that
  // list the members in different orders agree on them.
  std::sort(members.begin(), members.end());
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == world->rank()) my_index = static_cast<int>(i);
  // Every rank counts the call so the next group's keys differ, members or not.
  int64_t id = ++state().groups_created;
  if (my_index < 0) return make_non_group_member(world->rank());
  auto store = std::make_shared<PrefixStore>("group_" + std::to_string(id), state().store);
  auto group = make_group(state().backend, store, my_index, static_cast<int>(members.size()), timeout, state().host);
  auto& subgroups = state().subgroups;
  subgroups.erase(std::remove_if(subgroups.begin(), subgroups.end(), [](const auto& s) { return s.first.expired(); }),
                  subgroups.end());
  subgroups.emplace_back(group, std::move(members));
  return group;
}

WorkPtr all_reduce(Tensor& tensor, ReduceOp op, const ProcessGroupPtr& group, bool async_op) {
  auto work = group_or_default(group, "all_reduce")->all_reduce(tensor, op);
  if (!async_op) work->wait();
  return work;
}

WorkPtr broadcast(Tensor& tensor, int src, const ProcessGroupPtr& group, bool async_op) {
  // src is a global rank (PyTorch's): a new_group's root is its group rank.
  int root = src;
  if (group)
    for (const auto& [weak, members] : state().subgroups) {
      if (weak.owner_before(group) || group.owner_before(weak)) continue;  // another group
      auto it = std::find(members.begin(), members.end(), src);
      MINIDL_CHECK(it != members.end(), "broadcast: Global rank ", src, " is not part of group (its ranks: ",
                   shape_str(Shape(members.begin(), members.end())), ")");
      root = static_cast<int>(it - members.begin());
    }
  auto work = group_or_default(group, "broadcast")->broadcast(tensor, root);
  if (!async_op) work->wait();
  return work;
}

WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input, const ProcessGroupPtr& group, bool async_op) {
  auto work = group_or_default(group, "all_gather")->all_gather(outputs, input);
  if (!async_op) work->wait();
  return work;
}

// A barrier is about the host (every rank has got this far), so it blocks the
// host, not just later work.
void barrier(const ProcessGroupPtr& group) { group_or_default(group, "barrier")->barrier()->synchronize(); }

}  // namespace minidl::dist
