// libFuzzer target for token files (data/token_file.h): the input is the whole
// file. It is opened in both formats (llm.c header, headerless uint16) and read
// the ways the trainer and evaluation read it: windows at both ends, sequential
// evaluation batches and random training batches, each with a small vocabulary
// (so out-of-range tokens are common), a uint16-sized one and the int32 limit.
// Every failure must be a shamn::InputError; another exception, a crash or a
// sanitizer report is a finding. Build and run: tests/fuzz/build_and_run.sh
// token_file SECONDS (experiments/fuzzing.md).
#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/check.h"
#include "core/parallel.h"
#include "data/batch_loader.h"
#include "data/token_file.h"
#include "tests/fuzz/fuzz_fail.h"
#include "tests/fuzz/fuzz_scratch.h"

namespace {

using shamn::InputError;

// A window that reads must hold exactly the file's tokens, all < vocab.
void check_window(const shamn::TokenFile& file, int64_t begin, int64_t n, int64_t vocab) {
  try {
    const shamn::Tensor w = file.window(begin, n, vocab);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = w.data<int32_t>()[i];
      if (t < 0 || t >= vocab || static_cast<uint32_t>(t) != file.token(begin + i))
        shamn::fuzz::fail("a window holds a token that is not the file's or not < vocab");
    }
  } catch (const InputError&) {
  }
}

void read_like_the_trainer(const std::shared_ptr<const shamn::TokenFile>& file, int64_t vocab) {
  const int64_t n = file->size();
  check_window(*file, 0, std::min<int64_t>(n, 17), vocab);
  check_window(*file, n - std::min<int64_t>(n, 5), std::min<int64_t>(n, 5), vocab);
  // One token past the end, and a negative start, must be refused.
  try {
    file->window(n - 1, 2, vocab);
    shamn::fuzz::fail("a window past the end of the file was read");
  } catch (const InputError&) {
  }
  try {
    file->window(-1, 1, vocab);
    shamn::fuzz::fail("a window at a negative start was read");
  } catch (const InputError&) {
  }
  // Evaluation: consecutive windows, a few batches of them.
  for (const auto [batch, seq] : {std::pair<int64_t, int64_t>{2, 8}, {1, std::max<int64_t>(1, n - 1)}}) {
    try {
      const int64_t count = shamn::sequential_batch_count(*file, batch, seq);
      for (int64_t i = 0; i < std::min<int64_t>(count, 4); ++i)
        shamn::sequential_batch(*file, vocab, batch, seq, i);
    } catch (const InputError&) {
    }
  }
  // Training: random windows, on the caller's thread (no prefetch) so a finding replays.
  try {
    shamn::BatchLoader loader(file, vocab, 2, 8, /*seed=*/1, /*prefetch=*/false);
    loader.next();
    loader.seek(12345);
    loader.next();
  } catch (const InputError&) {
  }
}

void open_as(const std::string& path, shamn::TokenFormat format) {
  std::shared_ptr<const shamn::TokenFile> file;
  try {
    file = std::make_shared<const shamn::TokenFile>(path, format);
  } catch (const InputError&) {
    return;
  }
  if (file->size() <= 0) shamn::fuzz::fail("a token file opened with no tokens");
  for (const int64_t vocab : {int64_t{50}, int64_t{65536}, int64_t{1} << 31})
    read_like_the_trainer(file, vocab);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shamn::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = shamn::fuzz::write_scratch("tokens.bin", data, size);
  open_as(path, shamn::TokenFormat::llmc);
  open_as(path, shamn::TokenFormat::u16);
  return 0;
}
