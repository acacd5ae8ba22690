// libFuzzer target for tokenizer files (data/tokenizer_file.cpp): the input is
// the whole file, loaded with Tokenizer::load. A tokenizer that loads must
// encode and decode a short mixed text back to itself, refuse an id past its
// vocabulary, and write a file (to_text) that loads again to the same merges.
// Every failure must be a shamn::InputError; anything else is a finding.
// Build and run: tests/fuzz/build_and_run.sh tokenizer_file SECONDS.
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "data/tokenizer.h"
#include "tests/fuzz/fuzz_fail.h"
#include "tests/fuzz/fuzz_scratch.h"

namespace {

// ASCII words, digits, UTF-8, a NUL, an invalid byte, CR LF, a long run.
const std::string kText = std::string("Hello, w\xC3\xB6rld! 12345 the the\tthe ") + '\0' + "\xFF\r\n" +
                          std::string(70, '-') + " \xE2\x82\xAC";

void use(const shamn::Tokenizer& tok) {
  const std::vector<uint32_t> ids = tok.encode(kText);
  for (uint32_t id : ids)
    if (id >= tok.vocab_size()) shamn::fuzz::fail("encode produced an id >= vocab_size");
  if (tok.decode(ids) != kText) shamn::fuzz::fail("decode(encode(text)) != text");
  try {
    const uint32_t past = static_cast<uint32_t>(tok.vocab_size());
    tok.decode(&past, 1);
    shamn::fuzz::fail("decode accepted an id == vocab_size");
  } catch (const shamn::InputError&) {
  }
  try {
    const shamn::Tokenizer again = shamn::Tokenizer::parse(tok.to_text(), "to_text");
    if (again.merges().size() != tok.merges().size()) shamn::fuzz::fail("to_text lost merges");
  } catch (const shamn::InputError&) {
    shamn::fuzz::fail("the text to_text wrote does not load");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shamn::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = shamn::fuzz::write_scratch("tokenizer.txt", data, size);
  try {
    use(shamn::Tokenizer::load(path));
  } catch (const shamn::InputError&) {
  }
  return 0;
}
