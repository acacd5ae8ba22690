#include "data/prepare.h"

#include <cmath>
#include <filesystem>
#include <system_error>

#include "core/check.h"
#include "data/token_file.h"

namespace shamn {

namespace {

bool is_blank(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != '\v' && c != '\f') return false;
  return true;
}

// Block starts (0 first) and text.size() last. A paragraph block starts at a
// non-blank line that follows a blank one (blank lines at the very start stay
// with the first paragraph); a line block starts at every line.
std::vector<size_t> block_cuts(std::string_view text, bool by_line) {
  std::vector<size_t> cuts{0};
  bool prev_blank = false, seen_text = false;
  for (size_t s = 0; s < text.size();) {
    const size_t nl = text.find('\n', s);
    const size_t e = nl == std::string_view::npos ? text.size() : nl + 1;
    const bool blank = is_blank(text.substr(s, e - s));
    if (s > 0 && (by_line || (!blank && prev_blank && seen_text))) cuts.push_back(s);
    seen_text |= !blank;
    prev_blank = blank;
    s = e;
  }
  cuts.push_back(text.size());
  return cuts;
}

bool is_val_block(int64_t i, double f) {
  return std::floor(static_cast<double>(i + 1) * f) > std::floor(static_cast<double>(i) * f);
}

}  // namespace

TextSplit split_train_val(std::string_view text, double val_fraction, const std::string& source) {
  SHAMN_INPUT_CHECK(val_fraction > 0.0 && val_fraction <= 0.5, "--val-fraction must be in (0, 0.5], got ",
                    val_fraction);
  SHAMN_INPUT_CHECK(!text.empty(), "'", source, "' is empty: nothing to split");
  const double wanted = std::ceil(static_cast<double>(kMinValBlocks) / val_fraction);
  TextSplit split;
  std::vector<size_t> cuts = block_cuts(text, false);
  if (static_cast<double>(cuts.size() - 1) < wanted) {
    cuts = block_cuts(text, true);
    split.by_line = true;
  }
  split.blocks = static_cast<int64_t>(cuts.size()) - 1;
  for (int64_t i = 0; i < split.blocks; ++i) {
    const std::string_view block = text.substr(cuts[i], cuts[i + 1] - cuts[i]);
    if (is_val_block(i, val_fraction)) {
      split.val += block;
      ++split.val_blocks;
    } else {
      split.train += block;
    }
  }
  SHAMN_INPUT_CHECK(split.val_blocks > 0 && split.val_blocks < split.blocks, "'", source, "' has ",
                    split.blocks, " lines, too few to hold out a share of ", val_fraction,
                    ": it needs at least ", std::ceil(1.0 / val_fraction),
                    " (validation takes every (1/val-fraction)-th paragraph or line)");
  return split;
}

PrepareSummary prepare_token_files(std::string_view text, const std::string& source,
                                   const Tokenizer& tokenizer, const std::string& out_dir,
                                   double val_fraction) {
  const TextSplit split = split_train_val(text, val_fraction, source);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  SHAMN_INPUT_CHECK(!ec, "cannot create the output directory '", out_dir, "': ", ec.message());
  const std::vector<uint32_t> train = tokenizer.encode(split.train);
  const std::vector<uint32_t> val = tokenizer.encode(split.val);
  write_train_val_files(out_dir, train, val);
  PrepareSummary s;
  s.blocks = split.blocks;
  s.val_blocks = split.val_blocks;
  s.by_line = split.by_line;
  s.train_bytes = static_cast<int64_t>(split.train.size());
  s.val_bytes = static_cast<int64_t>(split.val.size());
  s.train_tokens = static_cast<int64_t>(train.size());
  s.val_tokens = static_cast<int64_t>(val.size());
  return s;
}

}  // namespace shamn
