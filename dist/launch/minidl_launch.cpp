// minidl-launch: starts the processes of a distributed job on one node, like
// torchrun with a static rendezvous.
//
//   minidl-launch [--nproc-per-node N] [--nnodes M] [--node-rank R]
//                 [--master-addr A] [--master-port P] [--timeout-kill S]
//                 PROGRAM [ARGS...]
//
// Starts N copies of PROGRAM ARGS... (fork + execvp). Options stop at PROGRAM;
// everything after it is passed through unchanged. torchrun's underscore
// spellings (--nproc_per_node, ...) are accepted too. Each child gets
// torchrun's environment variables:
//   RANK              node_rank * N + local_rank (the global rank)
//   LOCAL_RANK        0 .. N-1, the rank on this node
//   WORLD_SIZE        M * N
//   LOCAL_WORLD_SIZE  N
//   GROUP_RANK        node_rank
//   MASTER_ADDR       --master-addr (default 127.0.0.1), host of rank 0's store
//   MASTER_PORT       --master-port; on a single node (M == 1) it defaults to a
//                     free port (bind port 0, read it back, close it). With
//                     M > 1 it is required, since all nodes must agree.
// dist::init_process_group(..., "env://") reads them.
//
// Output: each child's stdout and stderr arrive through pipes; every complete
// line is printed as "[rank R] line" on the launcher's stdout or stderr. Lines
// are never cut by other ranks' output; a last line without '\n' is printed at
// exit. One thread polls all pipes plus a signalfd (SIGCHLD, SIGINT, SIGTERM,
// SIGHUP), so there are no races between signals and output.
//
// Failure: when a child exits non-zero or dies from a signal, the others get
// SIGTERM, then SIGKILL after --timeout-kill seconds (default 5); the launcher
// names the failed rank and exits with its exit code (1 for a signal).
// SIGINT/SIGTERM/SIGHUP sent to the launcher are forwarded to the children
// (a second one kills them at once), with the same cleanup; the launcher then
// dies from that signal itself. Children get PR_SET_PDEATHSIG(SIGKILL), so
// they never outlive a launcher that is killed outright.
// Exit codes: 0 all ranks succeeded, 2 bad usage, 125 PROGRAM could not be
// started (not found, not executable, fork failed) or the launcher itself
// failed, else the failed rank's code (1 for a signal). Its own codes stay in
// 1..125 (as docker run and timeout(1) use 125 for the wrapper's own
// failure): 126 and 127 are what a shell reports about minidl-launch itself.
// torchrun exits 1 for every failure, its own included.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int kUsageError = 2;
constexpr int kCannotStart = 125;  // PROGRAM not found / not executable, fork failed
constexpr int kExecFailed = 127;   // only the exec'ing child's code; never the launcher's
// A "line" longer than this without '\n' is printed in pieces so that a child
// writing a huge unterminated blob cannot grow the launcher's memory forever.
constexpr size_t kMaxLine = 1 << 16;

using Clock = std::chrono::steady_clock;

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free one (single node only)
  double timeout_kill = 5.0;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "minidl-launch: %s\nRun 'minidl-launch --help' for usage.\n",
               message.c_str());
  std::exit(kUsageError);
}

Options parse_options(int argc, char** argv) {
  Options o;
  // CLI11's usage line would not show PROGRAM [ARGS...].
  struct Formatter : CLI::Formatter {
    std::string make_usage(const CLI::App*, std::string) const override {
      return "Usage: minidl-launch [OPTIONS] PROGRAM [ARGS...]\n";
    }
  };
  CLI::App app("Starts the processes of a distributed minidl job (like torchrun).",
               "minidl-launch");
  app.formatter(std::make_shared<Formatter>());
  app.footer(
      "Each process gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "MASTER_ADDR and MASTER_PORT; its output lines are prefixed with \"[rank R] \".");
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                 "processes to start on this node");
  app.add_option("--nnodes", o.nnodes, "number of nodes");
  app.add_option("--node-rank,--node_rank", o.node_rank, "this node's rank, 0 .. nnodes-1");
  app.add_option("--master-addr,--master_addr", o.master_addr, "address of rank 0's node");
  auto* port = app.add_option("--master-port,--master_port", o.master_port,
                              "port of rank 0's store (default on one node: a free port)");
  app.add_option("--timeout-kill,--timeout_kill", o.timeout_kill,
                 "seconds between SIGTERM and SIGKILL when stopping the processes");
  app.prefix_command();  // stop at PROGRAM; the rest lands in remaining()
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  else if (!o.command.empty() && o.command.front().starts_with("-"))
    usage_error("unknown option " + o.command.front());
  if (o.command.empty()) usage_error("no PROGRAM given");
  if (o.nproc_per_node < 1)
    usage_error("--nproc-per-node must be at least 1, got " + std::to_string(o.nproc_per_node));
  if (o.nnodes < 1) usage_error("--nnodes must be at least 1, got " + std::to_string(o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    usage_error("--node-rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " +
                std::to_string(o.nnodes) + " (expected 0 <= node-rank < nnodes)");
  if (static_cast<long long>(o.nnodes) * o.nproc_per_node > 1'000'000)
    usage_error("--nnodes * --nproc-per-node must be at most 1000000");
  if (port->count() > 0 && (o.master_port < 1 || o.master_port > 65535))
    usage_error("--master-port must be in 1..65535, got " + std::to_string(o.master_port));
  if (!(o.timeout_kill >= 0 && o.timeout_kill <= 1e6))
    usage_error("--timeout-kill must be 0..1e6 seconds, got " + CLI::detail::to_string(o.timeout_kill));
  if (o.nnodes > 1 && port->count() == 0)
    usage_error("--master-port is required with --nnodes > 1 (all nodes must use the same port)");
  // An IPv6 address may come in brackets, as in a URL ([::1]): what getaddrinfo takes is without.
  if (o.master_addr.size() > 2 && o.master_addr.front() == '[' && o.master_addr.back() == ']')
    o.master_addr = o.master_addr.substr(1, o.master_addr.size() - 2);
  if (o.master_addr.empty()) usage_error("--master-addr is empty");
  return o;
}

// Binds port 0 on `addr`, reads back the port the kernel chose, and closes the
// socket. Another process could take the port before rank 0 binds it; the
// window is short and torchrun has the same one.
int find_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0)
    usage_error("cannot resolve --master-addr " + addr + ": " + gai_strerror(rc));
  std::string error = "no address";
  int port = 0;
  for (addrinfo* ai = found; ai != nullptr && port == 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      port = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (port == 0)
    usage_error("cannot find a free port on " + addr + " (" + error + "); pass --master-port");
  return port;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// write() until everything is out. Errors (say EPIPE when our stdout is a
// closed pipe) drop the output: the job itself must go on.
void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// One child pipe (its stdout or stderr) and the partial line read so far.
struct LineStream {
  int fd = -1;      // read end, non-blocking; -1 once closed
  int out_fd = -1;  // where its lines go: 1 or 2
  std::string prefix;
  std::string pending;

  void emit(std::string_view line) const {
    std::string out;
    out.reserve(prefix.size() + line.size() + 1);
    out.append(prefix).append(line).push_back('\n');
    write_all(out_fd, out.data(), out.size());  // one write per line keeps it whole
  }

  // Reads once; prints the complete lines. Returns false when nothing more
  // can be read now (EAGAIN) or ever (EOF or error; the pipe is then closed).
  bool read_some() {
    if (fd < 0) return false;
    char buffer[1 << 16];
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR)) return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) {
      close(fd);
      fd = -1;
      return false;
    }
    pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(std::string_view(pending).substr(start, nl - start));
    pending.erase(0, start);
    while (pending.size() >= kMaxLine) {
      emit(std::string_view(pending).substr(0, kMaxLine));
      pending.erase(0, kMaxLine);
    }
    return true;
  }

  // Reads what a dead child left in the pipe. Bounded: a grandchild that
  // still holds the pipe and keeps writing must not keep us here (a pipe
  // holds at most 1 MiB by default, 16 reads of 64 KiB).
  void drain() {
    for (int i = 0; i < 16 && read_some(); ++i) {
    }
  }

  void finish() {
    drain();
    if (!pending.empty()) emit(pending);
    pending.clear();
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

struct Child {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  LineStream out, err;
};

// Forks and execs one rank with its environment and its stdout/stderr on
// fresh pipes. Returns 0, or the errno of a failed fork/exec (the child then
// exits 127 and is reaped; the launcher, already stopping, does not report it).
int start_child(Child& c, const Options& o, const sigset_t& child_sigmask) {
  const int world_size = o.nnodes * o.nproc_per_node;
  setenv("RANK", std::to_string(c.rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(c.local_rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
  setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);

  std::vector<char*> argv;
  for (const std::string& arg : o.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  // All pipes are close-on-exec; dup2 below gives the child its own copies.
  int out_pipe[2], err_pipe[2], exec_status[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return errno;
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    close(out_pipe[0]), close(out_pipe[1]);
    return e;
  }
  if (pipe2(exec_status, O_CLOEXEC) != 0) {
    int e = errno;
    close(out_pipe[0]), close(out_pipe[1]), close(err_pipe[0]), close(err_pipe[1]);
    return e;
  }
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(kExecFailed);  // the launcher died before prctl
    sigprocmask(SIG_SETMASK, &child_sigmask, nullptr);
    signal(SIGPIPE, SIG_DFL);  // an ignored signal would stay ignored across exec
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execvp(argv[0], argv.data());
    int e = errno;
    ssize_t ignored = write(exec_status[1], &e, sizeof(e));
    (void)ignored;
    _exit(kExecFailed);
  }
  int fork_errno = errno;
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(exec_status[1]);
  if (pid < 0) {
    close(out_pipe[0]), close(err_pipe[0]), close(exec_status[0]);
    return fork_errno;
  }
  c.pid = pid;
  c.running = true;
  const std::string prefix = "[rank " + std::to_string(c.rank) + "] ";
  c.out = LineStream{out_pipe[0], STDOUT_FILENO, prefix, {}};
  c.err = LineStream{err_pipe[0], STDERR_FILENO, prefix, {}};
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);

  // EOF here means exec succeeded (the pipe closed on exec); an int is errno.
  int exec_errno = 0;
  ssize_t n;
  do n = read(exec_status[0], &exec_errno, sizeof(exec_errno));
  while (n < 0 && errno == EINTR);
  close(exec_status[0]);
  return n == static_cast<ssize_t>(sizeof(exec_errno)) ? exec_errno : 0;
}

class Launcher {
 public:
  explicit Launcher(Options options) : o_(std::move(options)) {}

  int run() {
    // Signals are read from a signalfd in the poll loop, never by handlers.
    sigset_t handled, original;
    sigemptyset(&handled);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
    sigprocmask(SIG_BLOCK, &handled, &original);
    signal_fd_ = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd_ < 0) {
      std::fprintf(stderr, "minidl-launch: signalfd: %s\n", std::strerror(errno));
      return kCannotStart;
    }
    signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher

    children_.resize(static_cast<size_t>(o_.nproc_per_node));
    for (int local = 0; local < o_.nproc_per_node; ++local) {
      Child& c = children_[static_cast<size_t>(local)];
      c.local_rank = local;
      c.rank = o_.node_rank * o_.nproc_per_node + local;
      if (int e = start_child(c, o_, original); e != 0) {
        if (c.pid > 0) {  // exec failed: the child exits at once, not reported as a rank's failure
          std::error_code ec;
          const bool dir = std::filesystem::is_directory(o_.command[0], ec);
          std::fprintf(stderr, "minidl-launch: cannot execute '%s': %s%s\n", o_.command[0].c_str(),
                       std::strerror(e), dir ? " (it is a directory)" : "");
        } else {
          std::fprintf(stderr, "minidl-launch: cannot start rank %d: %s\n", c.rank,
                       std::strerror(e));
        }
        failure_code_ = kCannotStart;
        begin_stop(SIGTERM);
        break;  // the same program would fail for every rank
      }
    }

    while (any_running()) poll_once();
    for (Child& c : children_) c.out.finish(), c.err.finish();
    close(signal_fd_);

    if (received_signal_ != 0) {  // die from the signal we got, as a shell expects
      std::fflush(nullptr);
      signal(received_signal_, SIG_DFL);
      sigprocmask(SIG_SETMASK, &original, nullptr);
      raise(received_signal_);
      return 128 + received_signal_;
    }
    return failure_code_;
  }

 private:
  bool any_running() const {
    for (const Child& c : children_)
      if (c.running) return true;
    return false;
  }

  void signal_running(int sig) {
    for (const Child& c : children_)
      if (c.running) kill(c.pid, sig);
  }

  // Sends `sig` to every running child and arms the SIGKILL deadline.
  void begin_stop(int sig) {
    stopping_ = true;
    signal_running(sig);
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(o_.timeout_kill));
  }

  void kill_now() {
    killed_ = true;
    signal_running(SIGKILL);
  }

  // Waits for output, a signal or the kill deadline, and handles what came.
  void poll_once() {
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    std::vector<LineStream*> streams{nullptr};
    for (Child& c : children_)
      for (LineStream* s : {&c.out, &c.err})
        if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0}), streams.push_back(s);

    int timeout_ms = -1;  // a SIGCHLD always comes, so waiting forever is bounded
    if (stopping_ && !killed_) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(kill_deadline_ - Clock::now());
      timeout_ms = static_cast<int>(std::max<long long>(0, left.count()));
    }
    int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      std::fprintf(stderr, "minidl-launch: poll: %s\n", std::strerror(errno));
      kill_now();
    }
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) kill_now();

    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) streams[i]->read_some();
    if (fds[0].revents != 0) handle_signals();
  }

  void handle_signals() {
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap_children();
      } else if (!stopping_) {
        received_signal_ = sig;
        std::fprintf(stderr, "minidl-launch: got %s, forwarding it to the processes\n",
                     signal_name(sig).c_str());
        begin_stop(sig);
      } else if (!killed_) {  // impatient: a second signal while stopping
        std::fprintf(stderr, "minidl-launch: got %s while stopping, killing the processes\n",
                     signal_name(sig).c_str());
        kill_now();
      }
    }
  }

  // SIGCHLDs merge, so reap every child that has exited.
  void reap_children() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (Child& c : children_) {
        if (c.pid != pid || !c.running) continue;
        c.running = false;
        c.out.drain();  // its last words come before the verdict
        c.err.drain();
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && !stopping_) report_failure(c, status);
      }
    }
  }

  void report_failure(const Child& c, int status) {
    std::string how;
    if (WIFEXITED(status)) {
      failure_code_ = WEXITSTATUS(status);
      how = "failed with exit code " + std::to_string(failure_code_);
    } else {
      failure_code_ = 1;
      how = "killed by signal " + signal_name(WTERMSIG(status));
      if (WCOREDUMP(status)) how += " (core dumped)";
    }
    std::fprintf(stderr, "minidl-launch: rank %d (local rank %d, pid %d) %s\n", c.rank,
                 c.local_rank, static_cast<int>(c.pid), how.c_str());
    int others = 0;
    for (const Child& other : children_) others += other.running;
    if (others > 0)
      std::fprintf(stderr, "minidl-launch: stopping the other %d process%s\n", others,
                   others == 1 ? "" : "es");
    begin_stop(SIGTERM);
  }

  Options o_;
  std::vector<Child> children_;
  int signal_fd_ = -1;
  bool stopping_ = false;  // SIGTERM (or the forwarded signal) has been sent
  bool killed_ = false;    // SIGKILL has been sent
  Clock::time_point kill_deadline_{};
  int failure_code_ = 0;     // exit code of the first failed rank
  int received_signal_ = 0;  // signal the launcher itself got
};

}  // namespace

int main(int argc, char** argv) {
  // With 0, 1 or 2 closed, a pipe could land there and be lost at exec.
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", O_RDWR);
  try {
    Options options = parse_options(argc, argv);
    if (options.master_port == 0) options.master_port = find_free_port(options.master_addr);
    return Launcher(std::move(options)).run();
  } catch (const std::exception& e) {  // e.g. std::bad_alloc: a message and 125, never an abort
    std::fprintf(stderr, "minidl-launch: error: %s\n", e.what());
    return kCannotStart;
  }
}
