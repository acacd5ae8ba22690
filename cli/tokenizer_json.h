#pragma once
// vLLM's tokenizer endpoints as JSON, which lm-evaluation-harness's "remote"
// tokenizer uses to score prompts by the server's own tokens:
// POST /tokenize {"prompt"} -> {"count", "max_model_len", "tokens"},
// POST /detokenize {"tokens"} -> {"prompt"}, GET /tokenizer_info.
// A body that cannot be read is a RequestError naming the field.
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace shamn::cli {

// The tokens of the body's "prompt" (a string; add_special_tokens is accepted
// and has no effect: the tokenizer has no special tokens).
std::string tokenize_json(const std::string& body, const Tokenizer& tokenizer, int64_t max_model_len);
// The text of the body's "tokens" (ids below vocab_size; ids past the tokenizer add none).
std::string detokenize_json(const std::string& body, const Tokenizer& tokenizer, int64_t vocab_size);
// What the tokenizer is: byte-level BPE, its vocabulary, and no special tokens
// (eos_token and bos_token null).
std::string tokenizer_info_json(const Tokenizer& tokenizer, int64_t vocab_size, int64_t max_model_len);

}  // namespace shamn::cli
