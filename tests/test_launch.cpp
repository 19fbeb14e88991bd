// Tests for minidl-launch (dist/launch/minidl_launch.cpp), run as a program:
// the environment each rank gets, argument pass-through, the "[rank R] "
// output prefix, stopping the other ranks when one fails, signals, and the
// usage errors. The ranks are small `sh -c` scripts.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// A launcher started by a test, its stdout and stderr on pipes.
struct Launched {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  Clock::time_point started;
};

struct Result {
  int exit_code = -1;    // when it exited
  int term_signal = 0;   // when a signal ended it
  std::string out, err;
  double seconds = 0;
};

Launched spawn_launcher(const std::vector<std::string>& args) {
  std::vector<std::string> all{MINIDL_LAUNCH_BIN};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2], err[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(pipe2(err, O_CLOEXEC) == 0);
  Launched l;
  l.started = Clock::now();
  l.pid = fork();
  REQUIRE(l.pid >= 0);
  if (l.pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(126);
  }
  close(out[1]);
  close(err[1]);
  l.out_fd = out[0];
  l.err_fd = err[0];
  return l;
}

// Reads both pipes to EOF and reaps the launcher. A launcher still running
// after 60 s is killed and the test fails: no test may hang.
Result finish_launcher(Launched l) {
  Result r;
  std::vector<pollfd> fds{{l.out_fd, POLLIN, 0}, {l.err_fd, POLLIN, 0}};
  std::string* sinks[] = {&r.out, &r.err};
  const auto deadline = l.started + std::chrono::seconds(60);
  int open_pipes = 2;
  while (open_pipes > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      kill(l.pid, SIGKILL);
      FAIL_CHECK("minidl-launch did not finish within 60 s");
      break;
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[1 << 16];
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative fds
        --open_pipes;
      }
    }
  }
  for (const pollfd& p : fds)
    if (p.fd >= 0) close(p.fd);
  int status = 0;
  while (waitpid(l.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(Clock::now() - l.started).count();
  return r;
}

Result run_launcher(const std::vector<std::string>& args) {
  return finish_launcher(spawn_launcher(args));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> sorted_lines(const std::string& text) {
  std::vector<std::string> lines = lines_of(text);
  std::sort(lines.begin(), lines.end());
  return lines;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A fresh directory where the ranks leave their pids; removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "minidl_test_launch_XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() { fs::remove_all(path); }

  // Waits (up to 20 s) until the ranks wrote pid.0 .. pid.(n-1); returns the pids.
  std::vector<pid_t> wait_for_pids(int n) const {
    std::vector<pid_t> pids;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      pids.clear();
      for (int r = 0; r < n; ++r) {
        std::ifstream in(path / ("pid." + std::to_string(r)));
        pid_t pid = 0;
        if (in >> pid && pid > 0) pids.push_back(pid);
      }
      if (static_cast<int>(pids.size()) == n) return pids;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("the ranks did not write their pids");
    return pids;
  }
};

// Whether `pid` is gone, or a zombie waiting for an init that may never reap
// it: either way it runs no more.
bool is_dead(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] == 'Z';
}

// Every rank writes its pid to $1/pid.$RANK first (sh keeps its pid through exec).
std::string with_pid_file(const std::string& script) {
  return "echo $$ > \"$1/pid.$RANK\"\n" + script;
}

const char* kPrintEnv =
    "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
    "$MASTER_PORT\"";

}  // namespace

TEST_CASE("launch: every rank gets torchrun's environment, one node, free port") {
  Result r = run_launcher({"--nproc-per-node", "3", "sh", "-c", kPrintEnv});
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  std::vector<std::string> lines = sorted_lines(r.out);
  REQUIRE(lines.size() == 3);
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    std::istringstream in(lines[static_cast<size_t>(rank)]);
    std::string tag, label, addr;
    int r_env = -1, local = -1, world = -1, local_world = -1, group = -1, port = -1;
    in >> tag >> label >> r_env >> local >> world >> local_world >> group >> addr >> port;
    CHECK(tag == "[rank");
    CHECK(label == std::to_string(rank) + "]");
    CHECK(r_env == rank);
    CHECK(local == rank);
    CHECK(world == 3);
    CHECK(local_world == 3);
    CHECK(group == 0);
    CHECK(addr == "127.0.0.1");
    CHECK(port > 0);
    CHECK(port <= 65535);
    ports.insert(std::to_string(port));
  }
  CHECK(ports.size() == 1);  // all ranks agree on the port
}

TEST_CASE("launch: second node of two, with dashes or torchrun's underscores") {
  std::vector<std::string> args;
  SUBCASE("dashes") {
    args = {"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
            "--master-addr", "10.0.0.7", "--master-port", "29555"};
  }
  SUBCASE("underscores, --opt=value") {
    args = {"--nnodes=2", "--node_rank=1", "--nproc_per_node=2", "--master_addr=10.0.0.7",
            "--master_port=29555"};
  }
  args.insert(args.end(), {"sh", "-c", kPrintEnv});
  Result r = run_launcher(args);
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(sorted_lines(r.out) == std::vector<std::string>{"[rank 2] 2 0 4 2 1 10.0.0.7 29555",
                                                        "[rank 3] 3 1 4 2 1 10.0.0.7 29555"});
}

TEST_CASE("launch: an IPv6 --master-addr, bare or in brackets, reaches MASTER_ADDR bare") {
  for (const std::string addr : {"fd00::7", "[fd00::7]"}) {
    CAPTURE(addr);
    Result r = run_launcher({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "1", "--master-addr", addr,
                             "--master-port", "29555", "sh", "-c", kPrintEnv});
    CHECK(r.exit_code == 0);
    CHECK(r.out == "[rank 1] 1 0 2 1 1 fd00::7 29555\n");
  }
}

TEST_CASE("launch: arguments after PROGRAM pass through unchanged") {
  const std::vector<std::string> expected{"[rank 0] <--nproc-per-node>", "[rank 0] <5>",
                                          "[rank 0] <-->", "[rank 0] <two words>",
                                          "[rank 0] <>"};
  const std::vector<std::string> program{"sh", "-c", "for a in \"$@\"; do echo \"<$a>\"; done",
                                         "sh", "--nproc-per-node", "5", "--", "two words", ""};
  std::vector<std::string> args;
  SUBCASE("program right after the options") { args = {"--nproc-per-node", "1"}; }
  SUBCASE("after a -- separator") { args = {"--nproc-per-node", "1", "--"}; }
  args.insert(args.end(), program.begin(), program.end());
  Result r = run_launcher(args);
  CHECK(r.exit_code == 0);
  CHECK(lines_of(r.out) == expected);
}

TEST_CASE("launch: stdout and stderr stay apart; a last line without newline is kept") {
  Result r = run_launcher({"--nproc-per-node", "2", "sh", "-c",
                           "echo out$RANK; echo err$RANK >&2; printf \"tail$RANK\""});
  CHECK(r.exit_code == 0);
  CHECK(sorted_lines(r.out) == std::vector<std::string>{"[rank 0] out0", "[rank 0] tail0",
                                                        "[rank 1] out1", "[rank 1] tail1"});
  CHECK(sorted_lines(r.err) == std::vector<std::string>{"[rank 0] err0", "[rank 1] err1"});
}

TEST_CASE("launch: a rank that succeeds early does not stop the others") {
  Result r = run_launcher(
      {"--nproc-per-node", "2", "sh", "-c", "[ $RANK = 0 ] && exit 0; sleep 0.3; echo done"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "[rank 1] done\n");
}

TEST_CASE("launch: a failing rank stops the others, and its exit code is the launcher's") {
  TempDir dir;
  // Rank 1 fails once the others are up; they would sleep for 60 s.
  const std::string script = with_pid_file(
      "if [ $RANK = 1 ]; then\n"
      "  i=0; while [ ! -s \"$1/pid.0\" ] || [ ! -s \"$1/pid.2\" ]; do\n"
      "    sleep 0.01; i=$((i+1)); [ $i -gt 2000 ] && break; done\n"
      "  echo 'rank one fails' >&2; exit 3\n"
      "fi\n"
      "exec sleep 60");
  Result r = run_launcher({"--nproc-per-node", "3", "sh", "-c", script, "sh", dir.path});
  CHECK(r.exit_code == 3);
  CHECK(r.seconds < 30);  // far below the 60 s sleep: the others were stopped, not awaited
  CHECK(contains(r.err, "[rank 1] rank one fails\n"));
  CHECK(contains(r.err, "minidl-launch: rank 1 (local rank 1, pid "));
  CHECK(contains(r.err, ") failed with exit code 3"));
  for (pid_t pid : dir.wait_for_pids(3)) CHECK(is_dead(pid));
}

TEST_CASE("launch: a rank that ignores SIGTERM is killed after --timeout-kill") {
  TempDir dir;
  // Rank 1 ignores SIGTERM before it tells its pid; then rank 0 fails.
  const std::string script =
      "if [ $RANK = 0 ]; then\n"
      "  echo $$ > \"$1/pid.0\"\n"
      "  i=0; while [ ! -s \"$1/pid.1\" ]; do sleep 0.01; i=$((i+1)); [ $i -gt 2000 ] && break; done\n"
      "  exit 5\n"
      "fi\n"
      "trap '' TERM\n"
      "echo $$ > \"$1/pid.1\"\n"
      "exec sleep 60";
  Result r = run_launcher(
      {"--nproc-per-node", "2", "--timeout-kill", "0.5", "sh", "-c", script, "sh", dir.path});
  CHECK(r.exit_code == 5);
  CHECK(r.seconds >= 0.5);  // rank 1 survived SIGTERM, so SIGKILL came after the timeout
  CHECK(r.seconds < 30);
  CHECK(contains(r.err, "minidl-launch: rank 0 (local rank 0, pid "));
  for (pid_t pid : dir.wait_for_pids(2)) CHECK(is_dead(pid));
}

TEST_CASE("launch: a rank killed by a signal is reported as such, exit code 1") {
  Result r = run_launcher(
      {"--nproc-per-node", "2", "sh", "-c", "[ $RANK = 1 ] && kill -SEGV $$; exec sleep 60"});
  CHECK(r.exit_code == 1);
  CHECK(r.seconds < 30);
  CHECK(contains(r.err, "minidl-launch: rank 1 (local rank 1, pid "));
  CHECK(contains(r.err, "killed by signal SIGSEGV"));
}

TEST_CASE("launch: SIGTERM to the launcher reaches the children") {
  TempDir dir;
  Launched l = spawn_launcher(
      {"--nproc-per-node", "2", "sh", "-c", with_pid_file("exec sleep 60"), "sh", dir.path});
  std::vector<pid_t> pids = dir.wait_for_pids(2);
  REQUIRE(kill(l.pid, SIGTERM) == 0);
  Result r = finish_launcher(l);
  CHECK(r.term_signal == SIGTERM);  // it dies from the signal it got, as a shell expects
  CHECK(r.seconds < 30);
  CHECK(contains(r.err, "minidl-launch: got SIGTERM"));
  for (pid_t pid : pids) CHECK(is_dead(pid));
}

TEST_CASE("launch: children do not outlive a launcher killed with SIGKILL") {
  TempDir dir;
  Launched l = spawn_launcher(
      {"--nproc-per-node", "2", "sh", "-c", with_pid_file("exec sleep 60"), "sh", dir.path});
  std::vector<pid_t> pids = dir.wait_for_pids(2);
  REQUIRE(kill(l.pid, SIGKILL) == 0);
  Result r = finish_launcher(l);
  CHECK(r.term_signal == SIGKILL);
  // PR_SET_PDEATHSIG kills them; give the kernel a moment (up to 10 s).
  for (pid_t pid : pids) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!is_dead(pid) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(is_dead(pid));
  }
}

TEST_CASE("launch: bad arguments exit 2 with a clear message") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases{
      {{}, "no PROGRAM given"},
      {{"--nproc-per-node", "2"}, "no PROGRAM given"},
      {{"--nproc-per-node", "0", "true"}, "--nproc-per-node must be at least 1, got 0"},
      {{"--nnodes", "0", "true"}, "--nnodes must be at least 1, got 0"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-port", "29555", "true"},
       "--node-rank 2 is out of range for --nnodes 2"},
      {{"--node-rank", "-1", "true"}, "--node-rank -1 is out of range for --nnodes 1"},
      {{"--nnodes", "2", "--node-rank", "0", "true"}, "--master-port is required with --nnodes > 1"},
      {{"--master-port", "0", "true"}, "--master-port must be in 1..65535, got 0"},
      {{"--master-port", "65536", "true"}, "--master-port must be in 1..65535, got 65536"},
      {{"--timeout-kill", "-1", "true"}, "--timeout-kill must be 0..1e6 seconds"},
      {{"--nproc-per-node", "two", "true"}, "--nproc-per-node"},
      {{"--bogus", "true"}, "unknown option --bogus"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    Result r = run_launcher(c.args);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.starts_with("minidl-launch: "));
    CHECK(contains(r.err, c.message));
  }
}

// The launcher's own codes stay in 1..125: 126/127 are the shell's about
// minidl-launch itself, and a rank's 127 must not look like "not found".
TEST_CASE("launch: a program that cannot be started is reported by name, exit 125") {
  const fs::path dir = fs::temp_directory_path() / ("minidl_launch_noexec_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path not_executable = dir / "script.sh";
  std::ofstream(not_executable) << "#!/bin/sh\nexit 0\n";
  fs::permissions(not_executable, fs::perms::owner_read | fs::perms::owner_write);
  struct Case {
    std::string program, reason;
  };
  const std::vector<Case> cases{
      {"/nonexistent/minidl_no_such_program", "No such file or directory"},
      {"minidl_no_such_program_on_path", "No such file or directory"},
      {not_executable.string(), "Permission denied"},
      {dir.string(), "Permission denied (it is a directory)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.program);
    Result r = run_launcher({"--nproc-per-node", "2", c.program, "arg"});
    CHECK(r.exit_code == 125);
    CHECK(contains(r.err, "minidl-launch: cannot execute '" + c.program + "': " + c.reason));
    CHECK(!contains(r.err, "exit code 127"));  // the exec'ing child's code is not reported as a rank's
  }
  fs::remove_all(dir);
}

TEST_CASE("launch: a rank's own exit code 127 passes through unchanged") {
  Result r = run_launcher({"--nproc-per-node", "1", "sh", "-c", "exit 127"});
  CHECK(r.exit_code == 127);
  CHECK(contains(r.err, "failed with exit code 127"));
}

TEST_CASE("launch: long lines from concurrent ranks are never interleaved") {
  // Each rank prints 200 lines of 5000+ characters (longer than PIPE_BUF, so
  // they reach the launcher in pieces) to stdout and to stderr, all at once.
  const int ranks = 4, count = 200, width = 5000;
  const std::string script =
      "s=$(head -c " + std::to_string(width) + " /dev/zero | tr '\\0' \"$RANK\")\n"
      "i=0; while [ $i -lt " + std::to_string(count) + " ]; do\n"
      "  printf '%s\\n' \"$RANK:$i:$s\"; printf '%s\\n' \"$RANK:$i:$s\" >&2; i=$((i+1)); done";
  Result r = run_launcher({"--nproc-per-node", std::to_string(ranks), "sh", "-c", script});
  CHECK(r.exit_code == 0);
  for (const std::string* stream : {&r.out, &r.err}) {
    std::vector<int> next(ranks, 0);  // per rank, lines arrive in order
    int bad = 0;
    for (const std::string& line : lines_of(*stream)) {
      const int rank = line.size() > 7 ? line[6] - '0' : -1;
      const std::string body = std::to_string(rank) + ":" +
                               std::to_string(rank >= 0 && rank < ranks ? next[rank] : -1) + ":" +
                               std::string(width, static_cast<char>('0' + rank));
      if (rank < 0 || rank >= ranks || line != "[rank " + std::to_string(rank) + "] " + body) {
        ++bad;
        continue;
      }
      ++next[rank];
    }
    CHECK(bad == 0);
    CHECK(next == std::vector<int>(ranks, count));
  }
}
