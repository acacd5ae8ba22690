// serve's adapters by name (cli/adapter_registry.h): loading and its refusals,
// unloading while a holder still uses the adapter, the request counters.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "cli/adapter_registry.h"
#include "core/check.h"
#include "infer/export_model.h"
#include "infer/infer_test_model.h"
#include "infer/lora_test_adapter.h"

namespace shamn::cli {
namespace {

// An adapter file for `m` from the spec, at dir/name.
std::string adapter_file(const InferModel& m, const test::Spec& s, const std::string& dir,
                         const std::string& name) {
  const std::vector<uint8_t> image = test::adapter_image(m.config(), m.file().header().source_id(), s);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  return path;
}

TEST_CASE("serve's adapters load by name, refuse bad names and files, and outlive an unload while held",
          "[serve][lora]") {
  const test::TestModel tm(test::model_toml(), "registry");
  const InferModel m = tm.runtime(ShqQuant::int8);
  test::Spec s;
  s.rank = 3;
  const std::string r3 = adapter_file(m, s, tm.dir, "r3.lora");
  s.rank = 5;
  s.q8 = true;
  const std::string r5 = adapter_file(m, s, tm.dir, "r5.lora");
  // A model file where an adapter belongs.
  const std::string model_file = tm.dir + "/model.shq";
  {
    ExportOptions o;
    o.quant = ShqQuant::int8;
    const std::vector<uint8_t> image = export_model_image(tm.checkpoint, o);
    std::ofstream(model_file, std::ios::binary)
        .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  }

  AdapterRegistry reg(m, "base.shq");
  CHECK(reg.names() == "none");
  CHECK(reg.find("a") == nullptr);
  reg.load("ft-3.v1_a", r3);
  reg.load("b", r5);
  CHECK(reg.names() == "b, ft-3.v1_a");
  const std::vector<ServedAdapter> list = reg.list();
  REQUIRE(list.size() == 2);
  CHECK((list[0].name == "b" && list[0].file == r5 && list[0].rank == 5));
  CHECK((list[1].name == "ft-3.v1_a" && list[1].file == r3 && list[1].rank == 3 && list[1].alpha == 8.0));

  // Refusals leave the registry as it was.
  CHECK_THROWS_WITH(reg.load("b", r3), Catch::Contains("an adapter named 'b' is loaded already"));
  // The name is checked before the file is read: a taken name with a bad file says so.
  CHECK_THROWS_WITH(reg.load("b", model_file), Catch::Contains("an adapter named 'b' is loaded already"));
  CHECK_THROWS_WITH(reg.check_name("b"), Catch::Contains("an adapter named 'b' is loaded already"));
  CHECK_NOTHROW(reg.check_name("c"));
  {
    // Two places: a third load is refused before its file is read, until one is unloaded.
    AdapterRegistry small(m, "base.shq", 2);
    small.load("a", r3);
    small.load("b", r5);
    CHECK_THROWS_WITH(small.load("c", r3),
                      Catch::Contains("holds the most adapters it may already (--max-adapters = 2)") &&
                          Catch::Contains("unload one first"));
    CHECK_THROWS_WITH(small.load("c", tm.dir + "/absent.lora"), Catch::Contains("--max-adapters = 2"));
    CHECK(small.unload("a"));
    small.load("c", r3);
    CHECK(small.names() == "b, c");
  }
  for (const char* bad : {"", "a b", "a\"b", "x/y"})
    CHECK_THROWS_WITH(reg.load(bad, r3), Catch::Contains("must be 1 to 64 letters, digits"));
  CHECK_THROWS_WITH(reg.load(std::string(65, 'a'), r3), Catch::Contains("must be 1 to 64"));
  CHECK_THROWS_WITH(reg.load("base.shq", r3), Catch::Contains("the adapter name 'base.shq' is the model's"));
  CHECK_THROWS_AS(reg.load("m", model_file), InputError);
  CHECK_THROWS_WITH(reg.load("m", model_file), Catch::Contains("is not a LoRA adapter file"));
  CHECK_THROWS_WITH(reg.load("gone", tm.dir + "/absent.lora"), Catch::Contains("absent.lora"));
  CHECK(reg.names() == "b, ft-3.v1_a");

  // A holder keeps an unloaded adapter alive; the name is free again.
  std::shared_ptr<const LoraAdapter> held = reg.find("b");
  REQUIRE(held != nullptr);
  const std::weak_ptr<const LoraAdapter> watch = held;
  CHECK(reg.unload("b"));
  CHECK_FALSE(reg.unload("b"));
  CHECK(reg.find("b") == nullptr);
  CHECK(reg.names() == "ft-3.v1_a");
  CHECK(held->rank() == 5);
  CHECK(held->layer(0).mixer_out != nullptr);
  held.reset();
  CHECK(watch.expired());  // the last holder let go: the file is unmapped
  reg.load("b", r3);
  CHECK(reg.find("b")->rank() == 3);

  // Counters by name survive an unload and start at 0 for a loaded name.
  reg.count_request("b");
  reg.count_request("b");
  reg.count_request("ft-3.v1_a");
  CHECK(reg.unload("b"));
  CHECK(reg.request_counts() == std::map<std::string, int64_t>{{"b", 2}, {"ft-3.v1_a", 1}});
  reg.load("new", r5);
  CHECK(reg.request_counts() == std::map<std::string, int64_t>{{"b", 2}, {"ft-3.v1_a", 1}, {"new", 0}});
}

TEST_CASE("serve keeps the request counters of its last max_adapters unloaded adapters, the rest summed",
          "[serve][lora]") {
  const test::TestModel tm(test::model_toml(), "registry_counters");
  const InferModel m = tm.runtime(ShqQuant::int8);
  test::Spec s;
  s.rank = 3;
  const std::string file = adapter_file(m, s, tm.dir, "a3.lora");
  AdapterRegistry reg(m, "m.shq", 2);
  // Five names, one request more each, loaded and unloaded in turn: the last two
  // unloaded keep their series; the three before them are summed (1 + 2 + 3).
  for (int i = 1; i <= 5; ++i) {
    std::string name = "a";  // appended: GCC 12 warns (-Wrestrict) on "a" + std::string falsely
    name += std::to_string(i);
    reg.load(name, file);
    for (int r = 0; r < i; ++r) reg.count_request(name);
    CHECK(reg.unload(name));
  }
  CHECK(reg.request_counts() == std::map<std::string, int64_t>{{"(other)", 6}, {"a4", 4}, {"a5", 5}});
  // A name loaded again is counted on in its own series, and leaves the unloaded ones.
  reg.load("a4", file);
  reg.count_request("a4");
  reg.load("a6", file);
  CHECK(reg.unload("a6"));  // no request: no series to keep
  CHECK(reg.request_counts() == std::map<std::string, int64_t>{{"(other)", 6}, {"a4", 5}, {"a5", 5}});
  // A request counted after its adapter's unload (found before it) is kept the same way.
  for (const char* name : {"late1", "late2", "late3"}) {
    reg.load(name, file);
    CHECK(reg.unload(name));
    reg.count_request(name);
  }
  CHECK(reg.request_counts() ==
        std::map<std::string, int64_t>{
            {"(other)", 12}, {"a4", 5}, {"late2", 1}, {"late3", 1}});  // a5 and late1 summed
}

TEST_CASE("serve's adapters load, unload and are looked up from many threads at once", "[serve][lora]") {
  const test::TestModel tm(test::model_toml(), "registry_threads");
  const InferModel m = tm.runtime(ShqQuant::int8);
  test::Spec s;
  s.rank = 2;
  s.matrices = {"layers.0.mixer.out"};
  const std::string file = adapter_file(m, s, tm.dir, "small.lora");
  AdapterRegistry reg(m, "base.shq");
  reg.load("shared", file);
  constexpr int kThreads = 4, kRounds = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&reg, &file, t] {
      const std::string own = "own" + std::to_string(t);
      for (int i = 0; i < kRounds; ++i) {
        reg.load(own, file);
        reg.count_request(own);
        reg.count_request("shared");
        const std::shared_ptr<const LoraAdapter> a = reg.find(own), b = reg.find("shared");
        if (a->rank() != 2 || b->rank() != 2 || reg.list().empty() || reg.names().empty()) return;
        if (!reg.unload(own)) return;
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(reg.names() == "shared");
  std::map<std::string, int64_t> want{{"shared", kThreads * kRounds}};
  for (int t = 0; t < kThreads; ++t) want["own" + std::to_string(t)] = kRounds;
  CHECK(reg.request_counts() == want);
}

}  // namespace
}  // namespace shamn::cli
