// A process killed with SIGKILL while it writes a checkpoint leaves the
// previous checkpoint loadable and exact. tests/checkpoint_writer writes
// version after version of a 4 MiB state dict (every element of version v
// equals v) through nn::save_state_dict; this test SIGKILLs it at random
// moments, mostly in the middle of a write, several times over the same
// path, and each time loads the file: it must be one whole version (no mix,
// no truncation), the last one the writer reported or the one it was
// finishing when killed. Also checks the writer never leaves the file absent.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "minidl/core/atomic_file.h"
#include "minidl/nn/serialize.h"
#include "tests/test_util.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

struct Writer {
  pid_t pid = -1;
  int out_fd = -1;
  std::string out;  // what it printed so far
};

Writer start_writer(const std::string& path, long first_version) {
  int out[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  Writer w;
  w.pid = fork();
  REQUIRE(w.pid >= 0);
  if (w.pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const std::string first = std::to_string(first_version);
    execl(MINIDL_CHECKPOINT_WRITER_BIN, MINIDL_CHECKPOINT_WRITER_BIN, path.c_str(), first.c_str(), nullptr);
    _exit(127);
  }
  close(out[1]);
  w.out_fd = out[0];
  fcntl(w.out_fd, F_SETFL, O_NONBLOCK);
  return w;
}

void read_available(Writer& w) {
  char buf[4096];
  ssize_t n;
  while ((n = read(w.out_fd, buf, sizeof(buf))) > 0) w.out.append(buf, static_cast<size_t>(n));
}

// The last "saved v" line, or -1.
long last_saved(const std::string& out) {
  const size_t at = out.rfind("saved ");
  return at == std::string::npos ? -1 : std::stol(out.substr(at + 6));
}

// The version every element of the file holds; fails the test if they differ.
long version_in(const std::string& path) {
  nn::Linear model(1024, 1024);
  nn::load_state_dict_file(*model, path);  // throws on a truncated or corrupt file
  const std::vector<float> w = model->weight.to_vector<float>(), b = model->bias.to_vector<float>();
  const float v = w.front();
  size_t mixed = 0;
  for (float e : w) mixed += e != v;
  for (float e : b) mixed += e != v;
  CHECK_MESSAGE(mixed == 0, mixed, " elements of ", path, " differ from its first one (", v, ")");
  return static_cast<long>(v);
}

}  // namespace

TEST_CASE("checkpoint: SIGKILL in the middle of save_state_dict leaves a whole previous version") {
  const fs::path dir = fs::temp_directory_path() / ("minidl_ckpt_kill_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  std::mt19937 rng(std::random_device{}());
  constexpr int kRounds = 8;
  int killed_after_a_save = 0;
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    const long first = 1000L * (round + 1);  // each round's versions are told apart from the last round's
    const long before = round == 0 ? -1 : version_in(path);
    Writer w = start_writer(path, first);
    // Wait for the first complete save (at most 20 s), then a random part of the next ones.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (last_saved(w.out) < first && std::chrono::steady_clock::now() < deadline) {
      read_available(w);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 40000)(rng)));
    kill(w.pid, SIGKILL);
    int status = 0;
    waitpid(w.pid, &status, 0);
    read_available(w);
    close(w.out_fd);
    REQUIRE_MESSAGE(WIFSIGNALED(status), "the writer exited by itself: ", w.out);
    const long saved = last_saved(w.out);
    REQUIRE_MESSAGE(saved >= first, "the writer never completed a save in 20 s (round ", round, ")");
    const long loaded = version_in(path);
    // The file is the last version reported, or the next one (renamed into
    // place but killed before it could print); never older, never a mix.
    CHECK_MESSAGE((loaded == saved || loaded == saved + 1), "loaded version ", loaded, " but the writer had saved ",
                  saved, " (previous round's file: ", before, ")");
    killed_after_a_save += loaded == saved;
  }
  MESSAGE("rounds where the kill hit during the next write (file = last reported save): ", killed_after_a_save,
          " of ", kRounds);
  // A killed writer leaves at most its temporary file behind, next to a whole
  // checkpoint; the next writer's first save removes it, so at most the last
  // round's temporary remains.
  int temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    CHECK_MESSAGE((name == "model.safetensors" || name.starts_with("model.safetensors.tmp.")), name);
    temporaries += name.starts_with("model.safetensors.tmp.");
  }
  CHECK_MESSAGE(temporaries <= 1, temporaries, " temporaries of killed writers were left behind");
  fs::remove_all(dir);
}

TEST_CASE("write_file_atomically removes the temporaries of dead writers, not of live ones") {
  const fs::path dir = fs::temp_directory_path() / ("minidl_stale_tmp_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt.json").string();
  // A pid that surely is dead: a child that has exited and been reaped.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  auto touch = [&](const std::string& name) { std::FILE* f = std::fopen((dir / name).c_str(), "w"); std::fclose(f); };
  const std::string dead = "ckpt.json.tmp." + std::to_string(child);
  const std::string live = "ckpt.json.tmp." + std::to_string(getppid());
  touch(dead);
  touch(live);
  touch("ckpt.json.tmp.notapid");
  touch("other.json.tmp." + std::to_string(child));
  write_file_atomically(path, {"{}"}, "test");
  CHECK_FALSE(fs::exists(dir / dead));
  CHECK(fs::exists(dir / live));
  CHECK(fs::exists(dir / "ckpt.json.tmp.notapid"));
  CHECK(fs::exists(dir / ("other.json.tmp." + std::to_string(child))));
  CHECK(fs::exists(path));
  fs::remove_all(dir);
}
