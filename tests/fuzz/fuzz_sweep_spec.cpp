// libFuzzer target for sweep files (sweep/sweep_spec.h): the input is a sweep
// file, then optionally a line "%%" and one command-line `--set` override per
// line. It is parsed (SweepSpec::from_file) and, when the base config it names
// exists, expanded (expand_sweep), which resolves and validates every point's
// run config. The base config scratch_dir()/base.toml is written once; the
// committed seeds name it. Every failure must be a shamn::InputError; anything
// else is a finding. Build and run: tests/fuzz/build_and_run.sh sweep_spec SECONDS.
#include <cstdint>
#include <string>

#include "core/check.h"
#include "sweep/sweep_spec.h"
#include "tests/fuzz/fuzz_fail.h"
#include "tests/fuzz/fuzz_scratch.h"
#include "tests/fuzz/sweep_base.h"

namespace {

// The library refuses sweeps beyond kMaxSweepPoints; expanding that many per
// execution would only slow the fuzzer, so larger (valid) sweeps stop at parsing.
constexpr int64_t kFuzzMaxPoints = 32;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string base = shamn::fuzz::sweep_base_toml();
  shamn::fuzz::write_scratch("base.toml", base.data(), base.size());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const shamn::fuzz::SplitInput input = shamn::fuzz::split_overrides(data, size);
  const std::string path =
      shamn::fuzz::write_scratch("sweep.toml", input.document.data(), input.document.size());
  try {
    const shamn::SweepSpec spec = shamn::SweepSpec::from_file(path);
    const int64_t points = shamn::sweep_point_count(spec);
    if (points < 1 || points > shamn::kMaxSweepPoints)
      shamn::fuzz::fail("SweepSpec::parse accepted a point count outside [1, kMaxSweepPoints]");
    if (points > kFuzzMaxPoints) return 0;
    const auto expanded = shamn::expand_sweep(spec, input.overrides);
    if (static_cast<int64_t>(expanded.size()) != points)
      shamn::fuzz::fail("expand_sweep made a different number of points than sweep_point_count");
  } catch (const shamn::InputError&) {
  }
  return 0;
}
