// Bad input a new user gave the library (issue 18's audit), each once a crash,
// a wrong answer or an error that named nothing: a null buffer, a DataLoader
// asked for far more worker threads than the system gives, a synthetic volume
// too large for memory, copy_ between overlapping views of one tensor.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "minidl/minidl.h"
#include "tests/test_util.h"

using namespace minidl;

TEST_CASE("from_buffer refuses a null pointer unless there are no bytes to copy") {
  CHECK_THROWS_WITH_AS(from_buffer(nullptr, {2, 3}, kFloat32),
                       doctest::Contains("from_buffer: expected a non-null data pointer for 24 bytes of shape [2, 3]"),
                       minidl::Error);  // was: SIGSEGV in memcpy
  const Tensor empty_ok = from_buffer(nullptr, {0, 3}, kFloat32);
  CHECK(empty_ok.numel() == 0);
  const float values[2] = {1.5f, -2.0f};
  CHECK(from_buffer(values, {2}, kFloat32).to_vector<float>() == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("DataLoader with far more workers than batches starts only what it needs") {
  // num_workers = 100000 over 3 batches: was 100000 threads asked for, the
  // system refusing one, and std::terminate from the started ones.
  data::DataLoader loader(testing::numbers_dataset(6), {.batch_size = 2, .num_workers = 100000});
  std::vector<int64_t> seen;
  for (auto& b : loader)
    for (int64_t t : b.targets.to_vector<int64_t>()) seen.push_back(t);
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
}

#if defined(__SANITIZE_ADDRESS__)
#define MINIDL_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MINIDL_TEST_ASAN 1
#endif
#endif

TEST_CASE("DataLoader turns a refused worker thread into an Error, not std::terminate") {
#ifdef MINIDL_TEST_ASAN
  MESSAGE("skipped under AddressSanitizer: it reserves more address space than the limit this test sets");
#else
  // In a child process: cap the address space just above what is mapped now,
  // so a few 8 MiB thread stacks fit and the rest are refused.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto dataset = testing::numbers_dataset(4000);
    Tensor warm = zeros({16});  // the allocator's first pages, before the cap
    rlimit cap{};
    std::ifstream statm("/proc/self/statm");
    size_t pages = 0;
    statm >> pages;
    cap.rlim_cur = cap.rlim_max = pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) + (64u << 20);
    if (setrlimit(RLIMIT_AS, &cap) != 0) _exit(3);
    try {
      data::DataLoader loader(dataset, {.batch_size = 1, .num_workers = 1000});
      for (auto& b : loader) (void)b;
      _exit(4);  // every thread started: the cap did not bite
    } catch (const minidl::Error& e) {
      _exit(std::string(e.what()).find("DataLoader: cannot start worker thread") != std::string::npos ? 0 : 5);
    } catch (...) {
      _exit(6);
    }
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child status ", status, " (signal ", (WIFSIGNALED(status) ? WTERMSIG(status) : 0), ")");
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
#endif
}

TEST_CASE("make_grain_volume names the size it cannot allocate") {
#ifdef MINIDL_TEST_ASAN
  MESSAGE("skipped under AddressSanitizer: its allocator aborts on a request of terabytes instead of throwing");
#else
  CHECK_THROWS_WITH_AS(data::make_grain_volume(100000, 100000, 100000, 0),
                       doctest::Contains("make_grain_volume: out of memory for a volume of (100000, 100000, 100000)"),
                       minidl::Error);  // was: std::bad_alloc
#endif
}

TEST_CASE("copy_ from an overlapping view of itself reads the values before the copy") {
  // t[:, 1:] = t[:, :2] walked element by element read what it had just
  // written: [[0, 0, 0], [3, 3, 3]] instead of [[0, 0, 1], [3, 3, 4]].
  Tensor t = arange(6.0).reshape({2, 3});
  t.narrow(1, 1, 2).copy_(t.narrow(1, 0, 2));
  CHECK(t.to_vector<float>() == std::vector<float>{0, 0, 1, 3, 3, 4});
  Tensor u = arange(6.0);
  u.narrow(0, 0, 5).copy_(u.narrow(0, 1, 5));  // the other direction
  CHECK(u.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 5});
  Tensor same = arange(4.0);
  same.copy_(same);  // the same view: nothing to protect
  CHECK(same.to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  // An expanded destination has no answer to which write wins: PyTorch's error.
  Tensor expanded = zeros({1, 3}).expand({4, 3});
  CHECK_THROWS_WITH_AS(expanded.copy_(randn({4, 3})),
                       doctest::Contains("copy_: unsupported operation: more than one element of the written-to "
                                         "tensor refers to a single memory location"),
                       minidl::Error);
}

TEST_CASE("CIFAR10 given a data file as its root says the file is not a folder") {
  // train_cifar10 --data .../data_batch_1.bin said ".../data_batch_1.bin/data_batch_1.bin: Not a directory".
  const auto dir = std::filesystem::temp_directory_path() / ("minidl_audit_cifar_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "data_batch_1.bin").string();
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH_AS(data::CIFAR10(file, true), doctest::Contains((file + " is a file, expected the folder").c_str()),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(data::CIFAR10((dir / "none").string(), true), doctest::Contains("No such file or directory"),
                       minidl::Error);
  std::filesystem::remove_all(dir);
}
