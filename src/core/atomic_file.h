// The one way a file is written: every output (safetensors, GGUF, PNG, latents, JSON, caches) goes through
// AtomicFile. The data goes to a temp file beside the target, `<name>.tmp.<12 random hex digits>`, created with
// O_EXCL|O_NOFOLLOW (never an existing file, never through a planted symlink), fsync'd, renamed over the target,
// and the folder fsync'd. The target is refused when it exists and is not a regular file (a device node, a FIFO,
// a folder: rename would replace it) or when it is one of the caller's inputs. The temp file is removed on every
// error (the destructor) and on every catchable terminating signal (HUP INT QUIT TERM USR1 USR2 PIPE ALRM), where
// the process left that signal's default action.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ernie {

class AtomicFile {
 public:
  // Checks the target, then creates the temp file. `inputs`: files this output must not be (same device and
  // inode once symlinks are resolved). Throws Error naming the path.
  explicit AtomicFile(const std::string& path, const std::vector<std::string>& inputs = {});
  ~AtomicFile();  // removes the temp file unless commit() renamed it
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

  void write(const void* data, size_t n);               // appends; throws Error ("disk full?") on failure
  void pwrite(const void* data, size_t n, size_t offset);  // at `offset`; the same
  // The data durable, renamed over the target, the rename durable. Throws Error (the temp file then removed).
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1, slot_ = -1;
};

// AtomicFile's checks of the target alone, for a front end to run before long work (a generation, a
// conversion): throws the Error that AtomicFile(path, inputs) would. `inputs_are` names the inputs in the
// message ("the input file", "the model's own input file").
void check_output_path(const std::string& path, const std::vector<std::string>& inputs = {},
                       const char* inputs_are = "the input file");

// The whole file at once through AtomicFile.
void write_file_atomic(const std::string& path, std::string_view bytes, const std::vector<std::string>& inputs = {});

// What a stat mode is, for messages: "a regular file", "a character device", ...
const char* file_kind_name(unsigned mode);

}  // namespace ernie
