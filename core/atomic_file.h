#pragma once
// Writes a file so that a reader sees either the old file or the complete new one,
// never a partial one: bytes go to a temporary file in the same directory
// (".<name>.tmp.<pid>", on the same file system so the rename is atomic), and
// commit() fsyncs it, renames it over the target and fsyncs the directory so the
// rename itself survives a crash. Without commit() (an error, an exception) the
// destructor removes the temporary file: nothing half-written is left behind.
#include <cstddef>
#include <string>

namespace shamn {

class AtomicFile {
 public:
  // Creates the temporary file; throws InputError naming `path` if it cannot.
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  // For writers that open the file themselves (HDF5): they must close it before commit().
  const std::string& temp_path() const { return temp_path_; }

  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace shamn
