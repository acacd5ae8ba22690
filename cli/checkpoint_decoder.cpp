#include "cli/checkpoint_decoder.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/config_table.h"
#include "core/hdf5_file.h"

namespace shamn::cli {

ReceptiveFieldDecoder::ReceptiveFieldDecoder(const ModelSource& model)
    : forward_(model.logit_function()),
      field_(model.config.n_layers * (model.config.mixer_kernel - 1) + 1),
      vocab_(model.config.vocab_size),
      scratch_(static_cast<size_t>(field_ * vocab_)) {}

void ReceptiveFieldDecoder::feed(const int32_t* tokens, int64_t n, float* logits) {
  SHAMN_CHECK(n >= 1, "ReceptiveFieldDecoder::feed needs at least one token");
  context_.insert(context_.end(), tokens, tokens + n);
  // Older tokens are out of reach of the next logits: keep only the field.
  if (static_cast<int64_t>(context_.size()) > field_)
    context_.erase(context_.begin(), context_.end() - field_);
  const auto w = static_cast<int64_t>(context_.size());
  forward_(context_.data(), w, scratch_.data());
  std::memcpy(logits, scratch_.data() + (w - 1) * vocab_, static_cast<size_t>(vocab_) * sizeof(float));
}

Tokenizer checkpoint_tokenizer(const std::string& checkpoint, const std::string& path, int64_t vocab) {
  std::string file = path;
  if (file.empty()) {
    const Hdf5Reader reader(checkpoint);
    const ConfigTable config =
        ConfigTable::parse(reader.string_attribute("config"), checkpoint + " (attribute config)");
    file = config.get_string("data.tokenizer").value_or("");
    SHAMN_INPUT_CHECK(!file.empty(), "'", checkpoint,
                      "' names no tokenizer (data.tokenizer): pass --tokenizer PATH to generate from it");
    SHAMN_INPUT_CHECK(std::filesystem::exists(file), "the checkpoint's tokenizer '", file,
                      "' (data.tokenizer of '", checkpoint, "') does not exist here: pass --tokenizer PATH");
  }
  Tokenizer tok = Tokenizer::load(file);
  SHAMN_INPUT_CHECK(tok.vocab_size() <= vocab, "tokenizer '", file, "' has ", tok.vocab_size(),
                    " tokens but the model '", checkpoint, "' has vocab_size ", vocab);
  return tok;
}

}  // namespace shamn::cli
