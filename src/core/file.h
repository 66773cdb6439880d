// Reading files that come from users: regular files only, opened without blocking, with a size cap, so a
// FIFO, a device (/dev/zero), a folder or a symlink loop in a model's place is a clear error, never a hang.
#pragma once
#include <cstddef>
#include <string>

namespace ernie {

// Opens `path` read-only (O_NONBLOCK: a FIFO cannot block the open) and checks it is a regular file; returns
// the descriptor (the caller closes it) and its size. Throws Error naming the path.
int open_regular_file(const std::string& path, size_t* size);

// Its first `n` bytes (fewer when the file is shorter), to tell a format by its magic.
std::string read_file_head(const std::string& path, size_t n);

// The whole file, at most `max_bytes` (a larger file is an Error saying so).
std::string read_regular_file(const std::string& path, size_t max_bytes);

}  // namespace ernie
