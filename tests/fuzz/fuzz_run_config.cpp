// libFuzzer target for run configs (train/run_config.h, core/config_table.h,
// core/model_config.h): the input is a TOML file, then optionally a line "%%"
// and one `--set key=value` override per line, loaded the way `shamn train`
// loads them (RunConfig::from_file). The [model] tables alone also go through
// ModelConfig::from_toml, as a checkpoint's config attribute does. A config
// that loads must write (to_toml) a config that loads to the same text.
// Every failure must be a shamn::InputError; anything else is a finding.
// Build and run: tests/fuzz/build_and_run.sh run_config SECONDS.
#include <cstdint>

#include "core/check.h"
#include "core/model_config.h"
#include "tests/fuzz/fuzz_fail.h"
#include "tests/fuzz/fuzz_scratch.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const shamn::fuzz::SplitInput input = shamn::fuzz::split_overrides(data, size);
  const std::string path =
      shamn::fuzz::write_scratch("run.toml", input.document.data(), input.document.size());
  try {
    const shamn::RunConfig config = shamn::RunConfig::from_file(path, input.overrides);
    const std::string text = config.to_toml();
    try {
      if (shamn::RunConfig::from_toml(text, "to_toml").to_toml() != text)
        shamn::fuzz::fail("to_toml does not read back to the same config");
    } catch (const shamn::InputError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      shamn::fuzz::fail("the config to_toml wrote does not load");
    }
  } catch (const shamn::InputError&) {
  }
  try {
    shamn::ModelConfig::from_toml(input.document, "fuzz (model only)");
  } catch (const shamn::InputError&) {
  }
  return 0;
}
