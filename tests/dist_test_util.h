// Multi-process tests: run_ranks(world, fn) forks `world` processes that each
// call fn(rank, world) with a fresh file:// rendezvous, waits for all of them
// within a deadline (killing every child if it passes), and returns what went
// wrong ("" when every rank exited 0). Inside a rank, use DIST_REQUIRE,
// DIST_REQUIRE_CLOSE and DIST_REQUIRE_THROWS_CONTAINS: they throw, the rank
// prints the message and exits 1. doctest's CHECK/REQUIRE inside a rank would
// fail silently (the child's doctest state never reaches the parent).
//
// The parent must not run tensor kernels before forking (an OpenMP runtime
// that has started threads does not survive fork); do all work in the ranks.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "minidl/dist/distributed.h"

namespace minidl::testing {

struct RankFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define DIST_REQUIRE(cond, ...)                                                                      \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::ostringstream dist_require_os;                                                            \
      dist_require_os << __FILE__ << ":" << __LINE__ << ": DIST_REQUIRE(" #cond ") failed " __VA_ARGS__; \
      throw ::minidl::testing::RankFailure(dist_require_os.str());                                  \
    }                                                                                                \
  } while (0)

// |a - b| <= atol + rtol * |b| for every element; names the worst element.
inline void dist_require_close(const Tensor& a, const Tensor& b, double rtol, double atol, const char* what) {
  auto x = a.to(kFloat64).contiguous().to_vector<double>();
  auto y = b.to(kFloat64).contiguous().to_vector<double>();
  if (x.size() != y.size())
    throw RankFailure(std::string(what) + ": sizes differ: " + std::to_string(x.size()) + " vs " +
                      std::to_string(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) {
      std::ostringstream os;
      os << what << ": element " << i << " differs: " << x[i] << " vs " << y[i] << " (rtol " << rtol << ", atol "
         << atol << ")";
      throw RankFailure(os.str());
    }
  }
}
#define DIST_REQUIRE_CLOSE(a, b, rtol, atol) ::minidl::testing::dist_require_close(a, b, rtol, atol, #a " vs " #b)

#define DIST_REQUIRE_THROWS_CONTAINS(expr, substr)                                                   \
  do {                                                                                               \
    bool dist_threw_ = false;                                                                        \
    try {                                                                                            \
      (void)(expr);                                                                                  \
    } catch (const std::exception& dist_e_) {                                                        \
      dist_threw_ = true;                                                                            \
      DIST_REQUIRE(std::string(dist_e_.what()).find(substr) != std::string::npos,                    \
                   << "message of " #expr ": '" << dist_e_.what() << "' lacks '" << substr << "'");   \
    }                                                                                                \
    DIST_REQUIRE(dist_threw_, << #expr " did not throw");                                             \
  } while (0)

// What f() and the processes it starts write to stderr (fd 2 goes to a file
// meanwhile; forked children inherit it).
inline std::string capture_stderr(const std::function<void()>& f) {
  char path[] = "/tmp/minidl-stderr-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("capture_stderr: mkstemp failed");
  struct Redirect {  // fd 2 back to the terminal and the file removed, also when f throws
    int fd, saved;
    const char* path;
    Redirect(int file, const char* name) : fd(file), saved((std::fflush(stderr), dup(2))), path(name) { dup2(fd, 2); }
    ~Redirect() {
      std::fflush(stderr);
      dup2(saved, 2);
      close(saved);
      close(fd);
      std::remove(path);
    }
  };
  Redirect redirect(fd, path);
  f();
  std::fflush(stderr);
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A loopback port that is bound but never listens: a connection to it is
// refused, and while this object lives no other server can take the port.
// (A port from a server that was closed again could be handed to another
// test's server, run in parallel, before a client gave up retrying on it.)
class RefusingPort {
 public:
  RefusingPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("RefusingPort: cannot bind a loopback socket");
    port_ = ntohs(a.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_, port_ = 0;
};

// A unique, not yet existing path for a file:// rendezvous.
inline std::string fresh_rendezvous_path() {
  static int counter = 0;
  std::string path = "/tmp/minidl-test-rdzv-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  std::remove(path.c_str());
  return path;
}

// Forks `world` ranks. With init (the default) each rank joins a process
// group of `backend` (gloo unless told) over a fresh file:// rendezvous before
// calling fn, and destroys it after; for nccl, LOCAL_RANK is the rank (its
// GPU). Returns "" on success, else one line per failed rank.
inline std::string run_ranks(int world, const std::function<void(int rank, int world)>& fn,
                             std::chrono::seconds deadline = std::chrono::seconds(120), bool init = true,
                             dist::Milliseconds collective_timeout = dist::Milliseconds(60000),
                             const std::string& backend = "gloo") {
  const std::string rdzv_path = fresh_rendezvous_path();
  const std::string rdzv = "file://" + rdzv_path;
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("run_ranks: fork failed");
    if (pid == 0) {
      int code = 0;
      try {
        if (init && backend == "nccl") setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
        if (init) dist::init_process_group(backend, rdzv, world, rank, collective_timeout);
        fn(rank, world);
        if (init) dist::destroy_process_group();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] %s\n", rank, e.what());
        code = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::string failures;
  std::vector<bool> done(world, false);
  auto until = std::chrono::steady_clock::now() + deadline;
  int remaining = world;
  while (remaining > 0) {
    for (int r = 0; r < world; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
          failures += "rank " + std::to_string(r) + " exited with " + std::to_string(WEXITSTATUS(status)) + "\n";
        else if (WIFSIGNALED(status))
          failures += "rank " + std::to_string(r) + " killed by signal " + std::to_string(WTERMSIG(status)) + "\n";
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > until) {
      for (int r = 0; r < world; ++r)
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          failures += "rank " + std::to_string(r) + " did not finish within the deadline (killed)\n";
        }
      break;
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // The last rank to close the store deletes the file; a rank that failed or
  // was killed never closes it, so the file would outlive the test.
  std::remove(rdzv_path.c_str());
  return failures;
}

}  // namespace minidl::testing
