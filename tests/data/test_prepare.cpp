#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/prepare.h"
#include "data/text_samples.h"
#include "data/token_file.h"
#include "tests/scratch_dir.h"

using namespace shamn;

namespace {

std::string temp_dir(const std::string& name) { return (test::scratch_root() / "prepare" / name).string(); }

std::vector<uint32_t> read_tokens(const std::string& path) {
  const TokenFile file(path);
  std::vector<uint32_t> ids;
  for (int64_t i = 0; i < file.size(); ++i) ids.push_back(file.token(i));
  return ids;
}

// Paragraph k: a few sentence lines, then a blank line (sometimes with spaces
// or \r in it, sometimes two).
std::string paragraph(int k) {
  std::string p =
      "Paragraph " + std::to_string(k) + " starts here.\nIt has " + std::to_string(k % 4 + 1) + " lines.\n";
  if (k % 5 == 1) p += "  An indented line.\n";
  const char* const blanks[] = {"\n", " \n", "\r\n", "\n\n"};
  return p + blanks[k % 4];
}

}  // namespace

TEST_CASE("prepare holds out every (1/f)-th paragraph and writes both token files", "[tokenizer][prepare]") {
  std::string text;
  std::string want_train, want_val;
  for (int k = 0; k < 400; ++k) {
    text += paragraph(k);
    ((k + 1) % 20 == 0 ? want_val : want_train) += paragraph(k);  // f = 0.05: 19, 39, ...
  }
  const TextSplit split = split_train_val(text, 0.05, "text.txt");
  CHECK(!split.by_line);
  CHECK(split.blocks == 400);
  CHECK(split.val_blocks == 20);
  CHECK(split.train == want_train);
  CHECK(split.val == want_val);

  const Tokenizer tok = Tokenizer::train(text, 400);
  const std::string dir = temp_dir("paragraphs");
  std::filesystem::remove_all(dir);
  const PrepareSummary s = prepare_token_files(text, "text.txt", tok, dir, 0.05);
  const std::vector<uint32_t> train = read_tokens(dir + "/train.bin");
  const std::vector<uint32_t> val = read_tokens(dir + "/val.bin");
  CHECK(s.train_tokens == static_cast<int64_t>(train.size()));
  CHECK(s.val_tokens == static_cast<int64_t>(val.size()));
  CHECK(s.train_bytes + s.val_bytes == static_cast<int64_t>(text.size()));
  CHECK(tok.decode(train) == want_train);
  CHECK(tok.decode(val) == want_val);
  CHECK(train == tok.encode(want_train));
}

TEST_CASE("prepare splits by lines when paragraphs are too few", "[tokenizer][prepare]") {
  std::string text;
  std::vector<std::string> lines;
  for (int k = 0; k < 50; ++k) lines.push_back("line " + std::to_string(k) + "\n");
  lines.back().pop_back();  // no newline at the very end
  for (const std::string& l : lines) text += l;
  const TextSplit split = split_train_val(text, 0.1, "lines.txt");
  CHECK(split.by_line);
  CHECK(split.blocks == 50);
  CHECK(split.val == lines[9] + lines[19] + lines[29] + lines[39] + lines[49]);
  CHECK(split.train.size() + split.val.size() == text.size());

  // Blank lines before the first paragraph stay with it.
  std::string paras = "\n\n";
  for (int k = 0; k < 40; ++k) {  // appended piece by piece: GCC 12 warns falsely on "p" + ... (-Wrestrict)
    paras += 'p';
    paras += std::to_string(k);
    paras += "\n\n";
  }
  const TextSplit ps = split_train_val(paras, 0.25, "paras.txt");
  CHECK(!ps.by_line);
  CHECK(ps.blocks == 40);
  CHECK(ps.val.substr(0, 6) == "p3\n\np7");
}

TEST_CASE("prepare rejects a bad val fraction or too little text", "[tokenizer][prepare]") {
  const std::string text = test::prose(20000, 3);
  for (double f : {0.0, -0.1, 0.51, 1.0, std::nan("")})
    CHECK_THROWS_WITH(split_train_val(text, f, "t.txt"),
                      Catch::Contains("--val-fraction must be in (0, 0.5]"));
  CHECK_NOTHROW(split_train_val(text, 0.5, "t.txt"));
  CHECK_THROWS_WITH(split_train_val("one\ntwo\n", 0.05, "short.txt"),
                    Catch::Contains("'short.txt' has 2 lines") && Catch::Contains("at least 20"));
  CHECK_THROWS_WITH(split_train_val("", 0.05, "empty.txt"), Catch::Contains("'empty.txt' is empty"));
  const Tokenizer tok;
  const std::string dir = temp_dir("never");
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(prepare_token_files(text, "t.txt", tok, dir, 0.7), InputError);
  CHECK(!std::filesystem::exists(dir));
}
