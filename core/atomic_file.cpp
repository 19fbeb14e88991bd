#include "minidl/core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "minidl/core/check.h"

namespace minidl {
namespace {

// Writes all of `bytes` to `fd`, retrying short writes.
bool write_all(int fd, const char* bytes, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, bytes, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Makes the rename durable too; a failure here only weakens durability, so it is ignored.
void fsync_parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// A writer killed mid-write (SIGKILL, OOM killer) leaves `path`.tmp.<pid>
// behind. After a successful replace, such temporaries of processes that no
// longer exist are removed; a live pid's temporary (another writer, or a
// reused pid) is left alone, so this never races with a running writer.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) ::unlink(it->path().c_str());
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces, const char* who) {
  // The pid keeps two processes writing the same path apart; a process killed
  // mid-write leaves only this temporary behind, never a broken `path`.
  MINIDL_CHECK(!path.empty(), who, ": expected a file path, got an empty one");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MINIDL_CHECK(fd >= 0, who, ": ", path, ": cannot create temporary file ", tmp, ": ", std::strerror(errno));
  auto give_up = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    MINIDL_FAIL(who, ": ", path, ": ", what, " ", tmp, " failed: ", reason);
  };
  for (std::string_view piece : pieces)
    if (!write_all(fd, piece.data(), piece.size())) give_up("writing");
  if (::fsync(fd) != 0) give_up("fsync of");
  if (::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    MINIDL_FAIL(who, ": ", path, ": closing ", tmp, " failed: ", reason);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    MINIDL_FAIL(who, ": ", path, ": renaming ", tmp, " into place failed: ", reason);
  }
  fsync_parent_dir(path);
  remove_stale_temporaries(path);
}

}  // namespace minidl
