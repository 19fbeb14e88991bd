// Stores: TCPStore (server thread + clients in one process), FileStore and
// PrefixStore: set/get/add/check/delete/wait, blocking get, timeouts, lost
// connections, file clean-up and corrupt files.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "minidl/dist/store.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;
using namespace std::chrono_literals;

namespace {

// The behaviour every store shares; `make` opens one more handle on the
// same store (another client, or the same file).
void check_store_semantics(const std::function<std::shared_ptr<Store>()>& make) {
  auto a = make();
  auto b = make();
  a->set("k", std::string("v\0x", 3));  // values are bytes
  CHECK(b->get("k") == std::string("v\0x", 3));
  CHECK(b->check({"k"}));
  CHECK_FALSE(b->check({"k", "absent"}));
  CHECK(a->add("counter", 5) == 5);
  CHECK(b->add("counter", -2) == 3);
  CHECK(a->num_keys() == 2);
  CHECK(b->delete_key("k"));
  CHECK_FALSE(b->delete_key("k"));
  CHECK_FALSE(a->check({"k"}));

  // get blocks until another handle sets the key.
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    b->set("late", "here");
  });
  CHECK(a->get("late") == "here");
  setter.join();

  // Concurrent adds from several handles are atomic.
  std::vector<std::thread> adders;
  for (int t = 0; t < 4; ++t)
    adders.emplace_back([&] {
      auto s = make();
      for (int i = 0; i < 25; ++i) s->add("atomic", 1);
    });
  for (auto& t : adders) t.join();
  CHECK(a->add("atomic", 0) == 100);

  // wait and get time out with the key named.
  a->set_timeout(200ms);
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_CONTAINS(a->get("never"), "never");
  CHECK_THROWS_CONTAINS(a->wait({"late", "never2"}, 150ms), "never2");
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // bounded, not a timing test
  a->set("text", "abc");
  CHECK_THROWS_CONTAINS(a->add("text", 1), "not an integer");
}

}  // namespace

TEST_CASE("TCPStore: set/get/add/check/delete/wait across clients") {
  TCPStore master("127.0.0.1", 0, /*is_master=*/true, 5s);
  REQUIRE(master.port() > 0);
  check_store_semantics([&] { return std::make_shared<TCPStore>("127.0.0.1", master.port(), false, 5s); });
  // The master's own handle sees the clients' keys.
  CHECK(master.get("atomic") == "100");
}

TEST_CASE("TCPStore: errors") {
  CHECK_THROWS_CONTAINS(TCPStore("127.0.0.1", 0, false), "needs the master's port");
  CHECK_THROWS_CONTAINS(TCPStore("127.0.0.1", 70000, true), "port must be in [0, 65535]");
  // No server: the client retries, then says where it tried to connect.
  const testing::RefusingPort no_server;
  CHECK_THROWS_CONTAINS(TCPStore("127.0.0.1", no_server.port(), false, 300ms), "could not connect to 127.0.0.1:");
  // A second master on the same port is refused.
  TCPStore master("127.0.0.1", 0, true, 1s);
  CHECK_THROWS_CONTAINS(TCPStore("127.0.0.1", master.port(), true, 1s), "cannot listen on port");
}

TEST_CASE("TCPStore: a client waiting for its master says so on stderr after 10 s") {
  const testing::RefusingPort no_server;
  const std::string text = testing::capture_stderr([&] {
    CHECK_THROWS_CONTAINS(TCPStore("127.0.0.1", no_server.port(), false, 10500ms), "could not connect to 127.0.0.1:");
  });
  CHECK(text.find("still waiting for rank 0's store at 127.0.0.1:" + std::to_string(no_server.port())) !=
        std::string::npos);
  CHECK(text.find("giving up after 10 s") != std::string::npos);
}

TEST_CASE("TCPStore: a client whose master exited gets a clear error") {
  auto master = std::make_unique<TCPStore>("127.0.0.1", 0, true, 1s);
  TCPStore client("127.0.0.1", master->port(), false, 1s);
  client.set("a", "1");
  master.reset();
  CHECK_THROWS_CONTAINS(client.set("b", "2"), "lost the connection");
}

TEST_CASE("FileStore: semantics, clean-up by the last user, corrupt file") {
  std::string path = "/tmp/minidl-test-filestore-" + std::to_string(getpid());
  std::remove(path.c_str());
  check_store_semantics([&] { return std::make_shared<FileStore>(path, -1, 5s); });
  std::remove(path.c_str());

  {
    FileStore a(path, 2), b(path, 2);
    a.set("x", "1");
    CHECK(b.get("x") == "1");
    CHECK(a.num_keys() == 1);
  }  // both closed: the file is gone
  CHECK(access(path.c_str(), F_OK) != 0);

  {
    std::ofstream f(path, std::ios::binary);
    uint32_t n = 3;
    f.write(reinterpret_cast<const char*>(&n), 4);
    f.write("key", 3);
    n = 100;  // a value of 100 bytes that is not there
    f.write(reinterpret_cast<const char*>(&n), 4);
  }
  CHECK_THROWS_CONTAINS(FileStore(path, -1), "is corrupt at byte offset 7");
  std::remove(path.c_str());
  CHECK_THROWS_CONTAINS(FileStore("", -1), "path is empty");
  CHECK_THROWS_CONTAINS(FileStore("/nonexistent-dir/x", -1), "cannot open /nonexistent-dir/x");
}

TEST_CASE("PrefixStore: keys live under the prefix") {
  TCPStore master("127.0.0.1", 0, true, 2s);
  auto base = std::make_shared<TCPStore>("127.0.0.1", master.port(), false, 2s);
  PrefixStore p1("g1", base), p2("g2", base);
  p1.set("k", "one");
  p2.set("k", "two");
  CHECK(p1.get("k") == "one");
  CHECK(p2.get("k") == "two");
  CHECK(base->get("g1/k") == "one");
  CHECK(p1.add("n", 2) == 2);
  CHECK_FALSE(p2.check({"n"}));
  p2.set_timeout(100ms);
  CHECK_THROWS_CONTAINS(p2.wait({"n"}, 100ms), "g2/n");
  CHECK_THROWS_CONTAINS(PrefixStore("x", nullptr), "underlying store is null");
}
