// libFuzzer target for the .shq loader: any input must either load or be
// rejected with a shamn::Error; another exception, a crash or a sanitizer
// report is a finding. Each input is tried twice: as it is, and with its
// checksums recomputed, because a random mutation almost never keeps the
// CRCs valid and would otherwise only ever exercise the checksum checks.
// Build and run: tests/fuzz/build_and_run.sh (experiments/fuzzing.md).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "infer/infer_model.h"
#include "infer/shq_file.h"
#include "tests/fuzz/shq_reseal.h"

namespace {

void load(const uint8_t* data, size_t size) {
  try {
    shamn::InferModel model(shamn::ShqFile::from_bytes(data, size, "fuzz"));
    // A file that loads must also run: the loader's checks are what make the
    // forward's unchecked reads (index tensors, row counts) safe.
    shamn::DecodeState state = model.new_state();
    std::vector<float> logits(static_cast<size_t>(model.vocab_size()));
    const int32_t tokens[2] = {0, static_cast<int32_t>(model.vocab_size() - 1)};
    model.forward(tokens, 2, state, logits.data(), /*all_logits=*/false);
  } catch (const shamn::Error&) {
    // Rejected with a message: what the loader is supposed to do.
  }
}

}  // namespace

// One thread: the fuzzer looks for memory errors, not speed, and a finding then
// replays the same way every time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shamn::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  load(data, size);
  std::vector<uint8_t> sealed(data, data + size);
  shamn::testing::shq_reseal(sealed, /*tensor_crcs=*/true);
  load(sealed.data(), sealed.size());
  return 0;
}
