#pragma once
// Writes a file so that a reader sees either the old file or the complete new one,
// never a partial one: bytes go to a temporary file in the same directory
// (".<name>.tmp.<pid>", on the same file system so the rename is atomic), and
// commit() fsyncs it, renames it over the target and fsyncs the directory so the
// rename itself survives a crash. Without commit() (an error, an exception) the
// destructor removes the temporary file: nothing half-written is left behind.
// A stop signal removes it too (core/temp_file_cleanup.h); a process killed
// outright cannot clean up: the next writer of the same name removes the
// temporary files of writers that are no longer running.
//
// `kind` names the file's fault-injection sites (core/fault.h): "<kind>.bytes",
// "<kind>.fsync", "<kind>.rename", "<kind>.dirsync".
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/temp_file_cleanup.h"

namespace shamn {

class AtomicFile {
 public:
  // Creates the temporary file; throws InputError naming `path` if it cannot.
  AtomicFile(const std::string& path, std::string kind);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  // For writers that open the file themselves (HDF5): they must close it before commit().
  const std::string& temp_path() const { return temp_path_; }
  const std::string& kind() const { return kind_; }

  void write(const void* data, size_t bytes);
  // fsyncs and closes the temporary file (its errors, a full disk's late ones
  // among them, surface here), leaving the rename to commit(), which syncs first
  // where this was not called: a writer of several files syncs them all before
  // it replaces any.
  void sync();
  void commit();

 private:
  void write_all(const char* p, size_t bytes);

  std::string path_, temp_path_, kind_;
  TempFileRegistration registration_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool synced_ = false, committed_ = false;
};

// Throws InputError naming `path` if it exists and is not a regular file (or a
// link to one): renaming over a device would replace it (-o /dev/null deleting
// /dev/null for everyone, when run as root), and over a directory fails late.
void check_replaceable(const std::string& path);

// check_replaceable, and that `path`'s directory exists and is writable: for an
// output named on the command line, checked before the work that makes it.
void check_output_path(const std::string& path);

// The whole of `text` as `path`, atomically.
void write_file_atomically(const std::string& path, const std::string& text,
                           const std::string& kind = "text");

// A copy of the file `from` as `to`, atomically (for where a hard link cannot be made).
void copy_file_atomically(const std::string& from, const std::string& to, const std::string& kind);

// ".<name>.tmp.<pid><suffix>" next to `path`: this process's temporary name for
// it, for writers that make the file some other way (a hard link, gnuplot) and
// rename it into place; `suffix` for a program that reads the extension.
std::string temp_path_for(const std::string& path, const std::string& suffix = "");

// Removes ".<name>.tmp.<pid><suffix>" files next to `path` whose process no longer
// runs; returns how many. (A live pid is never touched, even if it was reused.)
int remove_orphaned_temp_files(const std::string& path, const std::string& suffix = "");

}  // namespace shamn
