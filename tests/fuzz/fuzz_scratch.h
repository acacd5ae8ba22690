#pragma once
// Helpers shared by the libFuzzer targets whose library entry points take a
// path, not bytes: a scratch directory of this process (under /dev/shm when it
// exists, so each execution's file write stays in RAM, else $TMPDIR or /tmp),
// and the split of a text input into a document plus `--set` lines.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tests/scratch_dir.h"

namespace shamn::fuzz {

// Created on first use; the pid keeps parallel fuzzers (-jobs, -fork) apart.
// Removed at a normal exit (-max_total_time, -runs); a crash leaves it for replaying.
inline const std::filesystem::path& scratch_dir() {
  static const test::OwnedDir scratch = [] {
    std::filesystem::path base = "/dev/shm";
    if (!std::filesystem::is_directory(base)) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? tmp : "/tmp";
    }
    return test::OwnedDir(base / ("shamn_fuzz_" + std::to_string(::getpid())));
  }();
  return scratch.path();
}

// Writes the bytes to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const void* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();  // the harness itself is broken: stop loudly
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// The input as a document followed, after a line "%%", by one `--set`
// override per line (empty lines skipped).
struct SplitInput {
  std::string document;
  std::vector<std::string> overrides;
};

inline SplitInput split_overrides(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  SplitInput out;
  const size_t mark = text.starts_with("%%\n") ? 0 : text.find("\n%%\n");
  if (mark == std::string_view::npos) {
    out.document = std::string(text);
    return out;
  }
  out.document = std::string(text.substr(0, mark == 0 ? 0 : mark + 1));
  std::string_view rest = text.substr(mark == 0 ? 3 : mark + 4);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    if (!line.empty()) out.overrides.emplace_back(line);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace shamn::fuzz
