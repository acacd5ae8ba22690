#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fault.h"
#include "data/batch_loader.h"
#include "data/data_helpers.h"
#include "data/token_file.h"

namespace shamn {
namespace {

using test::data_temp_dir;
using test::llmc_bytes;
using test::write_bytes;

std::vector<std::string> directory_names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Resident memory, in bytes, from a /proc/self/status field ("VmRSS", "RssAnon").
int64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  return -1;
}

}  // namespace

TEST_CASE("bad token files give errors naming the file and the offset", "[data][token_file]") {
  const auto dir = data_temp_dir("bad_files");
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    TokenFormat format;
    std::vector<std::string> expected;
  };
  const std::vector<uint32_t> ten(10, 7);
  const std::vector<Case> cases = {
      {"wrong_magic.bin", llmc_bytes(12345, 1, 10, ten), TokenFormat::llmc, {"bad magic 12345 at offset 0"}},
      {"wrong_version.bin",
       llmc_bytes(kTokenMagicU16, 2, 10, ten),
       TokenFormat::llmc,
       {"version 2 at offset 4", "expected 1"}},
      {"wrong_version_u32.bin",
       llmc_bytes(kTokenMagicU32, 1, 10, ten, 4),
       TokenFormat::llmc,
       {"version 1 at offset 4", "expected 7"}},
      {"short_header.bin",
       std::vector<uint8_t>(500, 1),
       TokenFormat::llmc,
       {"is 500 bytes, shorter than llm.c's 1024-byte header"}},
      {"truncated.bin",
       llmc_bytes(kTokenMagicU16, 1, 20, ten),
       TokenFormat::llmc,
       {"is truncated", "(offset 8) says 20 tokens", "ending at byte 1064", "file ends at byte 1044"}},
      {"mismatch.bin",
       llmc_bytes(kTokenMagicU16, 1, 4, ten),
       TokenFormat::llmc,
       {"size mismatch", "(offset 8) says 4 tokens", "12 unexpected bytes from offset 1032"}},
      {"negative.bin",
       llmc_bytes(kTokenMagicU16, 1, -3, ten),
       TokenFormat::llmc,
       {"negative token count -3 at offset 8"}},
      {"no_tokens.bin", llmc_bytes(kTokenMagicU16, 1, 0, {}), TokenFormat::llmc, {"holds no tokens"}},
      {"empty.bin", {}, TokenFormat::llmc, {"is empty (0 bytes)"}},
      {"empty_u16.bin", {}, TokenFormat::u16, {"is empty (0 bytes)"}},
      {"odd.bin",
       {1, 0, 2, 0, 3, 0, 4},
       TokenFormat::u16,
       {"is 7 bytes, an odd size", "byte at offset 6 is half a token"}},
      {"llmc_as_u16.bin",
       llmc_bytes(kTokenMagicU16, 1, 10, ten),
       TokenFormat::u16,
       {"starts with llm.c's magic", "format llmc"}},
  };
  for (const Case& c : cases) {
    const std::string path = (dir / c.name).string();
    write_bytes(path, c.bytes);
    INFO(c.name);
    CHECK_THROWS_AS(TokenFile(path, c.format), InputError);
    for (const std::string& part : c.expected) {
      CHECK_THROWS_WITH(TokenFile(path, c.format), Catch::Contains("'" + path + "'"));
      CHECK_THROWS_WITH(TokenFile(path, c.format), Catch::Contains(part));
    }
  }
  const std::string absent = (dir / "absent.bin").string();
  CHECK_THROWS_WITH(TokenFile(absent), Catch::Contains("cannot open token file '" + absent + "'") &&
                                           Catch::Contains("No such file"));
  CHECK_THROWS_WITH(TokenFile(dir.string()), Catch::Contains("is not a regular file"));
}

TEST_CASE("a token >= vocab or a window past the end names the file and offset", "[data][token_file]") {
  const auto dir = data_temp_dir("bad_tokens");
  const std::string llmc = (dir / "llmc.bin").string();
  write_token_file(llmc, {1, 2, 300, 4, 5});
  const TokenFile file(llmc);
  CHECK(file.window(0, 2, 256).data<int32_t>()[1] == 2);
  CHECK_THROWS_AS(file.window(0, 5, 256), InputError);
  CHECK_THROWS_WITH(file.window(1, 3, 256),
                    Catch::Contains("'" + llmc + "'") && Catch::Contains("token 300 at index 2") &&
                        Catch::Contains("byte offset 1028") && Catch::Contains(">= vocab_size 256"));
  CHECK(file.window(0, 5, 301).data<int32_t>()[2] == 300);
  CHECK_THROWS_WITH(file.window(3, 4, 301), Catch::Contains("'" + llmc + "' has 5 tokens") &&
                                                Catch::Contains("cannot read tokens [3, 7)") &&
                                                Catch::Contains("bytes [1030, 1038)"));

  const std::string u16 = (dir / "raw.bin").string();
  write_bytes(u16, {1, 0, 2, 0, 44, 1});  // 1, 2, 300
  CHECK_THROWS_WITH(TokenFile(u16, TokenFormat::u16).window(0, 3, 256),
                    Catch::Contains("token 300 at index 2 (byte offset 4)"));

  const std::string wide = (dir / "wide.bin").string();
  write_token_file(wide, {70000, 1, 2});
  CHECK_THROWS_WITH(TokenFile(wide).window(0, 3, 65536),
                    Catch::Contains("token 70000 at index 0 (byte offset 1024)"));
}

TEST_CASE("check_vocab finds the first token >= vocab anywhere in the file", "[data][token_file]") {
  const auto dir = data_temp_dir("check_vocab");
  const std::string path = (dir / "long.bin").string();
  std::vector<uint32_t> tokens(200000, 7);
  tokens[150001] = 500;  // in the third 64K chunk
  tokens[199999] = 900;
  write_token_file(path, tokens);
  const TokenFile file(path);
  CHECK_NOTHROW(file.check_vocab(901));
  CHECK_THROWS_WITH(file.check_vocab(900), Catch::Contains("token 900 at index 199999"));
  CHECK_THROWS_WITH(file.check_vocab(300),
                    Catch::Contains("token 500 at index 150001") && Catch::Contains("byte offset 301026"));
  CHECK_NOTHROW(file.check_vocab(65536));
}

TEST_CASE("headerless u16 files read as raw tokens", "[data][token_file]") {
  const auto dir = data_temp_dir("u16");
  const std::string path = (dir / "train.bin").string();
  write_bytes(path, {5, 0, 0, 1, 255, 255, 9, 0});
  const TokenFile file(path, TokenFormat::u16);
  CHECK(file.size() == 4);
  CHECK(file.bytes_per_token() == 2);
  CHECK(file.byte_offset(3) == 6);
  CHECK(file.token(0) == 5);
  CHECK(file.token(1) == 256);
  CHECK(file.token(2) == 65535);
  const Tensor w = file.window(1, 3, 65536);
  CHECK(w.data<int32_t>()[0] == 256);
  CHECK(w.data<int32_t>()[2] == 9);
}

TEST_CASE("write_token_file round-trips uint16 and uint32 (version 7) tokens", "[data][token_file]") {
  const auto dir = data_temp_dir("roundtrip");
  std::mt19937 gen(3);
  for (const uint32_t max_token : {uint32_t{65535}, uint32_t{1} << 20}) {
    std::vector<uint32_t> tokens(1000);
    for (uint32_t& t : tokens) t = gen() % (max_token + 1);
    tokens[500] = max_token;
    const std::string path = (dir / ("max" + std::to_string(max_token) + ".bin")).string();
    write_token_file(path, tokens);
    const TokenFile file(path);
    const int width = max_token > 65535 ? 4 : 2;
    INFO("max token " << max_token);
    CHECK(file.bytes_per_token() == width);
    CHECK(std::filesystem::file_size(path) == 1024 + 1000 * static_cast<uintmax_t>(width));
    REQUIRE(file.size() == 1000);
    const Tensor all = file.window(0, 1000, int64_t{max_token} + 1);
    for (int64_t i = 0; i < 1000; ++i) {
      CHECK(file.token(i) == tokens[static_cast<size_t>(i)]);
      CHECK(all.data<int32_t>()[i] == static_cast<int32_t>(tokens[static_cast<size_t>(i)]));
    }
  }
  CHECK(directory_names(dir) == std::vector<std::string>{"max1048576.bin", "max65535.bin"});
}

TEST_CASE("write_token_file replaces atomically and leaves nothing behind on error", "[data][token_file]") {
  const auto dir = data_temp_dir("atomic");
  const std::string path = (dir / "tokens.bin").string();
  write_token_file(path, {1, 2, 3});
  write_token_file(path, {4, 5});
  CHECK(TokenFile(path).size() == 2);
  CHECK(TokenFile(path).token(1) == 5);
  CHECK(directory_names(dir) == std::vector<std::string>{"tokens.bin"});

  const std::string missing_dir = (dir / "missing" / "tokens.bin").string();
  CHECK_THROWS_AS(write_token_file(missing_dir, {1}), InputError);
  CHECK_THROWS_WITH(write_token_file(missing_dir, {1}), Catch::Contains("'" + missing_dir + "'"));
  // A regular file where the directory should be: unwritable even for root.
  const std::string under_file = path + "/tokens.bin";
  CHECK_THROWS_WITH(write_token_file(under_file, {1}), Catch::Contains("'" + under_file + "'"));
  CHECK(directory_names(dir) == std::vector<std::string>{"tokens.bin"});
  CHECK(TokenFile(path).size() == 2);

  // A write that fails part way (a full disk after 1,030 bytes: the header and three
  // tokens) leaves the old file whole and no temporary file beside it.
  fault::set_for_testing("tokens.bytes:1030:enospc");
  CHECK_THROWS_WITH(write_token_file(path, {7, 8, 9, 10, 11}),
                    Catch::Contains("'" + path + "'") && Catch::Contains("after 1030 bytes"));
  fault::set_for_testing("");
  CHECK(directory_names(dir) == std::vector<std::string>{"tokens.bin"});
  CHECK(TokenFile(path).size() == 2);
}

TEST_CASE("train.bin and val.bin are replaced as a pair", "[data][token_file]") {
  const auto dir = data_temp_dir("pair");
  const std::string train = (dir / "train.bin").string(), val = (dir / "val.bin").string();
  write_train_val_files(dir.string(), {1, 2, 3}, {4, 5});
  CHECK(directory_names(dir) == std::vector<std::string>{"train.bin", "val.bin"});
  // val.bin (3,024 bytes) fails at byte 2,000, after train.bin (1,044 bytes) was written
  // in full: neither old file is touched.
  const std::vector<uint32_t> new_train(10, 7), new_val(1000, 8);
  fault::set_for_testing("tokens.bytes:2000:enospc");
  CHECK_THROWS_WITH(write_train_val_files(dir.string(), new_train, new_val),
                    Catch::Contains("'" + val + "'") && Catch::Contains("after 2000 bytes"));
  fault::set_for_testing("");
  CHECK(directory_names(dir) == std::vector<std::string>{"train.bin", "val.bin"});
  CHECK(TokenFile(train).size() == 3);
  CHECK(TokenFile(val).size() == 2);
  // Each file's fsync (where a full disk's late errors and EIO surface) fails before
  // anything is replaced: the old pair stays.
  for (const char* fsync_fault : {"tokens.fsync:1:eio", "tokens.fsync:2:enospc"}) {
    INFO(fsync_fault);
    fault::set_for_testing(fsync_fault);
    CHECK_THROWS_WITH(write_train_val_files(dir.string(), new_train, new_val), Catch::Contains("failed"));
    fault::set_for_testing("");
    CHECK(directory_names(dir) == std::vector<std::string>{"train.bin", "val.bin"});
    CHECK(TokenFile(train).size() == 3);
    CHECK(TokenFile(val).size() == 2);
  }
  // A rename that fails between the two leaves no val.bin of the old tokenizer.
  fault::set_for_testing("tokens.rename:2:eio");
  CHECK_THROWS_WITH(write_train_val_files(dir.string(), new_train, new_val),
                    Catch::Contains("'" + val + "'"));
  fault::set_for_testing("");
  CHECK(directory_names(dir) == std::vector<std::string>{"train.bin"});
  CHECK(TokenFile(train).size() == 10);
  write_train_val_files(dir.string(), new_train, new_val);
  CHECK(TokenFile(val).size() == 1000);
}

TEST_CASE("a token file cut short while mapped is an error naming it, not a SIGBUS", "[data][token_file]") {
  const auto dir = data_temp_dir("cut_short");
  const std::string path = (dir / "tokens.bin").string();
  std::vector<uint32_t> tokens(8192);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i % 200);
  write_token_file(path, tokens);
  auto file = std::make_shared<const TokenFile>(path);
  BatchLoader loader(file, 256, 4, 64, 1, /*prefetch=*/false);
  CHECK(loader.next().inputs.numel() == 4 * 64);
  CHECK(file->window(8000, 100, 256).numel() == 100);
  // As `cp other.bin tokens.bin` does first: the file emptied in place under the mapping.
  REQUIRE(::truncate(path.c_str(), 1024) == 0);
  const std::string cut = "'" + path + "' was cut short while in use: it was 17408 bytes and is now 1024";
  CHECK_THROWS_WITH(file->window(8000, 100, 256), Catch::Contains(cut));
  CHECK_THROWS_WITH(loader.next(), Catch::Contains(cut));
  CHECK_THROWS_WITH(file->check_vocab(256), Catch::Contains(cut));
}

TEST_CASE("a FIFO as a token file is refused at once rather than waited on", "[data][token_file]") {
  const auto dir = data_temp_dir("fifo");
  const std::string path = (dir / "tokens.fifo").string();
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(TokenFile(path), Catch::Contains("'" + path + "' is not a regular file"));
}

TEST_CASE("token formats are named llmc and u16", "[data][token_file]") {
  CHECK(token_format_from_string("llmc") == TokenFormat::llmc);
  CHECK(token_format_from_string("u16") == TokenFormat::u16);
  CHECK_THROWS_AS(token_format_from_string("bin"), InputError);
  CHECK_THROWS_WITH(token_format_from_string("bin"),
                    Catch::Contains("'bin'") && Catch::Contains("llmc") && Catch::Contains("u16"));
}

// The file is mapped, never copied: sampling batches from a 64 MB file must not add
// anywhere near 64 MB of the process's own (anonymous) memory. VmRSS is no measure of
// that: it also counts the page-cache pages the mapping shows, and with the file
// cached the kernel maps up to 16 neighbouring pages per fault (fault-around, which
// MADV_RANDOM does not turn off), so 16000 random windows map nearly all of it
// (measured: VmRSS +64 MB, RssAnon +0). Those pages are shared and reclaimable; a copy
// would be anonymous.
TEST_CASE("sampling from a mapped token file does not copy it into RAM", "[data][token_file][rss]") {
  const auto dir = data_temp_dir("rss");
  const std::string path = (dir / "big.bin").string();
  const int64_t count = int64_t{32} << 20;  // 64 MB of uint16 tokens
  {
    std::ofstream out(path, std::ios::binary);
    const std::vector<uint8_t> header = llmc_bytes(kTokenMagicU16, 1, static_cast<int32_t>(count), {});
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    std::vector<uint16_t> chunk(1 << 16);
    for (int64_t i = 0; i < count; i += static_cast<int64_t>(chunk.size())) {
      for (size_t j = 0; j < chunk.size(); ++j) chunk[j] = static_cast<uint16_t>((i + j) % 32000);
      out.write(reinterpret_cast<const char*>(chunk.data()), sizeof(uint16_t) * chunk.size());
    }
  }
  const int64_t anon_before = status_bytes("RssAnon");
  const int64_t file_pages_before = status_bytes("RssFile");
  REQUIRE(anon_before > 0);
  {
    auto file = std::make_shared<const TokenFile>(path);
    BatchLoader loader(file, 32000, 8, 64, 1, /*prefetch=*/false);
    int64_t checksum = 0;
    for (int i = 0; i < 2000; ++i) checksum += loader.next().targets.data<int32_t>()[7];
    CHECK(checksum > 0);
    const int64_t anon_growth = status_bytes("RssAnon") - anon_before;
    const int64_t file_growth = status_bytes("RssFile") - file_pages_before;
    INFO("RssAnon grew " << anon_growth / 1024 << " kB, RssFile " << file_growth / 1024 << " kB");
    CHECK(anon_growth < (int64_t{16} << 20));
    CHECK(file_growth <= static_cast<int64_t>(std::filesystem::file_size(path)) + (int64_t{4} << 20));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace shamn
