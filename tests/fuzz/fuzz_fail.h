#pragma once
// A property the fuzz target checks failed: print why and abort, so libFuzzer
// saves the input as a crash-* file. (A thrown exception other than the one a
// target expects reaches libFuzzer's own handler and is saved the same way.)
#include <cstdio>
#include <cstdlib>

namespace shamn::fuzz {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

}  // namespace shamn::fuzz
