// metrics.jsonl under faults: a failed append is an error naming the file, and a
// resume drops the torn record a crash leaves while keeping every whole one.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/check.h"
#include "core/fault.h"
#include "tests/scratch_dir.h"
#include "train/metrics_log.h"
#include "train_fixture.h"

using namespace shamn;

TEST_CASE("a failed metrics append is an error, and a resume drops the torn record",
          "[train][metrics][fault]") {
  const auto dir = test::scratch_dir("metrics");
  const std::string path = (dir / "metrics.jsonl").string();
  {
    MetricsLog log(path, false, 0);
    log.write(1, {{"loss", 2.5}});
    log.write(2, {{"loss", 2.25}});
    fault::set_for_testing("metrics.append:2:enospc");
    log.write(3, {{"loss", 2.0}});
    CHECK_THROWS_WITH(log.write(4, {{"loss", 1.75}}),
                      Catch::Contains(path) && Catch::Contains("No space left on device"));
    fault::set_for_testing("");
  }
  const std::string torn = test::read_text(path);
  CHECK(torn.substr(0, torn.rfind('\n') + 1) ==
        "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.25}\n{\"step\":3,\"loss\":2.0}\n");
  CHECK(torn.substr(torn.rfind('\n') + 1) == "{\"step\":4,\"");  // half the record
  {
    MetricsLog log(path, true, 4);  // even a torn record of an earlier step goes
    log.write(4, {{"loss", 1.75}});
  }
  CHECK(test::read_text(path) ==
        "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.25}\n{\"step\":3,\"loss\":2.0}\n"
        "{\"step\":4,\"loss\":1.75}\n");
  std::filesystem::remove_all(dir);
}
