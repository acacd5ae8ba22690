#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/text_samples.h"
#include "data/tokenizer.h"
#include "tests/scratch_dir.h"

using namespace shamn;

namespace {

std::string temp_path(const std::string& name) {
  const auto dir = test::scratch_root() / "tokenizer";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string write_text(const std::string& name, const std::string& content) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("tokenizer files round-trip and follow the documented format", "[tokenizer][file]") {
  const Tokenizer tiny = Tokenizer::train("ab ab ab abc", 259);
  const std::string tiny_path = temp_path("tiny.bpe");
  tiny.save(tiny_path);
  CHECK(read_text(tiny_path) == "shamn-bpe 1\nvocab_size 259\n97 98\n32 256\n257 99\n");

  const std::string text = test::prose(200000, 5);
  const Tokenizer t = Tokenizer::train(text, 700);
  const std::string path = temp_path("prose.bpe");
  t.save(path);
  const Tokenizer back = Tokenizer::load(path);
  CHECK(back.merges() == t.merges());
  CHECK(back.vocab_size() == 700);
  CHECK(back.encode(text) == t.encode(text));
  // Saving leaves no temporary file behind.
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("malformed tokenizer files name the file and line", "[tokenizer][file]") {
  struct Case {
    const char* name;
    std::string content;
    int line;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"empty", "", 1, "empty file"},
      {"magic", "shamn-bpx 1\nvocab_size 256\n", 1, "expected the header 'shamn-bpe 1'"},
      {"version", "shamn-bpe 2\nvocab_size 256\n", 1, "unsupported format 'shamn-bpe 2'"},
      {"crlf", "shamn-bpe 1\r\nvocab_size 256\r\n", 1, "Windows line endings"},
      {"no vocab line", "shamn-bpe 1\n", 2, "file ends before the line 'vocab_size N'"},
      {"vocab key", "shamn-bpe 1\nvocab 256\n", 2, "expected 'vocab_size N'"},
      {"vocab number", "shamn-bpe 1\nvocab_size 25x\n", 2, "expected 'vocab_size N'"},
      {"vocab negative", "shamn-bpe 1\nvocab_size -3\n", 2, "expected 'vocab_size N'"},
      {"vocab small", "shamn-bpe 1\nvocab_size 255\n", 2, "vocab_size 255 is outside [256, "},
      {"vocab huge", "shamn-bpe 1\nvocab_size 99999999999\n", 2, "is outside [256, 16777216]"},
      {"bad merge", "shamn-bpe 1\nvocab_size 258\n97 98\n97,99\n", 4, "expected a merge 'LEFT RIGHT'"},
      {"one id", "shamn-bpe 1\nvocab_size 257\n97\n", 3, "expected a merge 'LEFT RIGHT'"},
      {"three ids", "shamn-bpe 1\nvocab_size 257\n97 98 99\n", 3, "expected a merge"},
      {"two spaces", "shamn-bpe 1\nvocab_size 257\n97  98\n", 3, "expected a merge"},
      {"id ahead", "shamn-bpe 1\nvocab_size 258\n97 98\n256 257\n", 4,
       "merge 1 (256 257) makes id 257, so it may only use ids below 257"},
      {"self", "shamn-bpe 1\nvocab_size 257\n256 97\n", 3, "may only use ids below 256"},
      {"repeat", "shamn-bpe 1\nvocab_size 259\n97 98\n32 256\n97 98\n", 5,
       "merge (97 98) repeats the merge on line 3"},
      {"too few", "shamn-bpe 1\nvocab_size 260\n97 98\n32 256\n", 5,
       "file ends after 2 merges, but vocab_size 260 needs 4"},
      {"too many", "shamn-bpe 1\nvocab_size 257\n97 98\n32 256\n", 4,
       "after the 1 merges that vocab_size 257 calls for"},
      {"cut mid-line", "shamn-bpe 1\nvocab_size 258\n97 98\n32 2", 4,
       "does not end in a newline (truncated file?)"},
      {"blank line", "shamn-bpe 1\nvocab_size 257\n\n", 3, "expected a merge"},
  };
  for (const Case& c : cases) {
    const std::string path = write_text("bad.bpe", c.content);
    INFO(c.name);
    CHECK_THROWS_AS(Tokenizer::load(path), InputError);
    CHECK_THROWS_WITH(Tokenizer::load(path), Catch::Contains(path + ":" + std::to_string(c.line) + ": ") &&
                                                 Catch::Contains(c.message));
  }
  CHECK_THROWS_WITH(Tokenizer::load(temp_path("absent.bpe")), Catch::Contains("cannot open tokenizer file"));
}
