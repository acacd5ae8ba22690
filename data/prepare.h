#pragma once
// `shamn prepare`: a text, tokenized into a training and a validation token file.
//
// The split is deterministic and spreads validation over the whole text (a
// corpus ordered by genre or date would otherwise give a one-genre tail):
//   1. The text is cut into blocks: a block is a paragraph, running up to and
//      including the blank lines after it (a blank line holds only spaces, \t,
//      \r, \v, \f). Text with fewer than kMinValBlocks / val_fraction
//      paragraphs is cut into lines instead (a block per line, '\n' included).
//   2. Block i (from 0) goes to validation when floor((i + 1) * f) > floor(i * f)
//      for f = val_fraction: every (1/f)-th block (f = 0.05: blocks 19, 39, 59,
//      ...), so validation holds about f of the blocks, and of the bytes.
//   3. The train blocks, concatenated in order, are encoded into train.bin; the
//      validation blocks likewise into val.bin (llm.c format, data/token_file.h).
// val_fraction must be in (0, 0.5]; the text must give at least one block of each.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace shamn {

inline constexpr int64_t kMinValBlocks = 10;

struct TextSplit {
  std::string train, val;
  int64_t blocks = 0, val_blocks = 0;
  bool by_line = false;  // fewer paragraphs than kMinValBlocks / val_fraction
};

// `source` names the text in error messages (its file).
TextSplit split_train_val(std::string_view text, double val_fraction, const std::string& source);

struct PrepareSummary {
  int64_t blocks = 0, val_blocks = 0;
  bool by_line = false;
  int64_t train_bytes = 0, val_bytes = 0, train_tokens = 0, val_tokens = 0;
};

// Writes OUT_DIR/train.bin and OUT_DIR/val.bin (creating OUT_DIR).
PrepareSummary prepare_token_files(std::string_view text, const std::string& source,
                                   const Tokenizer& tokenizer, const std::string& out_dir,
                                   double val_fraction);

}  // namespace shamn
