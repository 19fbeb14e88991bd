// Replacing a file so that a crash at any moment (SIGKILL, power loss) leaves
// either the old contents or the new ones, never a mix or a truncated file:
// the bytes go to a temporary file in the same directory, are fsync'ed, the
// temporary is renamed over the target (atomic on POSIX), and the directory
// is fsync'ed so the rename itself survives a power loss. Checkpoints
// (safetensors files, train_cifar10's checkpoint.json) are written this way.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace minidl {

// Writes the concatenation of `pieces` to `path` atomically. `who` prefixes
// errors (minidl::Error naming the file, the step and errno's reason); on an
// error the temporary file is removed and `path` is left as it was. After a
// successful write, temporaries of `path` left by writers that were killed
// (`path`.tmp.<pid> of a pid that no longer exists) are removed.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces, const char* who);

}  // namespace minidl
