#include "minidl/core/atomic_file.h"

#include <fcntl.h>
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

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces, const char* who) {
  // The pid keeps two processes writing the same path apart; a process killed
  // mid-write leaves only this temporary behind, never a broken `path`.
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
}

}  // namespace minidl
