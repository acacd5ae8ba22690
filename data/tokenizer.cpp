#include "data/tokenizer.h"

#include <algorithm>

#include "core/check.h"
#include "core/parallel.h"
#include "data/pretokenize.h"

namespace shamn {

namespace {

// Big enough that a block's cache of frequent chunks pays off, small enough
// that a few MB of text still spread over the threads.
constexpr size_t kEncodeBlockBytes = size_t{1} << 19;
constexpr size_t kMaxCachedChunks = size_t{1} << 16;

uint64_t pair_key(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

}  // namespace

Tokenizer::Tokenizer(std::vector<Merge> merges) : merges_(std::move(merges)) {
  SHAMN_CHECK(vocab_size() <= kMaxVocabSize, "a tokenizer holds at most ", kMaxVocabSize, " tokens, got ",
              vocab_size());
  bytes_.reserve(static_cast<size_t>(vocab_size()));
  for (int c = 0; c < 256; ++c) bytes_.emplace_back(1, static_cast<char>(c));
  ranks_.reserve(merges_.size());
  for (size_t i = 0; i < merges_.size(); ++i) {
    const Merge m = merges_[i];
    SHAMN_CHECK(m.left < bytes_.size() && m.right < bytes_.size(), "merge ", i, " (", m.left, " ", m.right,
                ") uses an id >= its own id ", bytes_.size());
    // emplace keeps the first rank of a repeated pair: the later one could never apply.
    ranks_.emplace(pair_key(m.left, m.right), static_cast<uint32_t>(i));
    bytes_.push_back(bytes_[m.left] + bytes_[m.right]);
    longest_ = std::max(longest_, static_cast<int64_t>(bytes_.back().size()));
  }
}

Tokenizer Tokenizer::train(std::string_view text, int64_t vocab_size) {
  SHAMN_INPUT_CHECK(vocab_size <= kMaxVocabSize, "vocab_size ", vocab_size,
                    " is too large: a tokenizer holds at most ", kMaxVocabSize, " tokens");
  return Tokenizer(train_bpe(text, vocab_size));
}

uint32_t Tokenizer::rank_of(uint32_t left, uint32_t right) const {
  const auto it = ranks_.find(pair_key(left, right));
  return it == ranks_.end() ? kNoMerge : it->second;
}

void Tokenizer::encode_chunk(std::string_view chunk, std::vector<uint32_t>& out) const {
  // Chunks are at most kMaxChunkBytes long, so the symbols and the ranks of
  // adjacent pairs fit on the stack and a linear scan finds the lowest rank.
  uint32_t sym[kMaxChunkBytes];
  uint32_t rank[kMaxChunkBytes];
  size_t n = chunk.size();
  for (size_t i = 0; i < n; ++i) sym[i] = static_cast<unsigned char>(chunk[i]);
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(sym[i], sym[i + 1]);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoMerge) break;
    sym[best] = 256 + rank[best];
    for (size_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) rank[i] = rank[i + 1];
    --n;
    if (best > 0) rank[best - 1] = rank_of(sym[best - 1], sym[best]);
    if (best + 1 < n) rank[best] = rank_of(sym[best], sym[best + 1]);
  }
  out.insert(out.end(), sym, sym + n);
}

void Tokenizer::encode_block(std::string_view block, std::vector<uint32_t>& out) const {
  // chunk -> (offset, length) of its ids where `out` first received them.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;
  for (size_t b = 0; b < block.size();) {
    const size_t e = chunk_end(block, b);
    const std::string_view chunk = block.substr(b, e - b);
    b = e;
    if (chunk.size() == 1) {
      out.push_back(static_cast<unsigned char>(chunk[0]));
      continue;
    }
    const auto hit = cache.find(chunk);
    if (hit != cache.end()) {
      const auto [offset, length] = hit->second;
      const size_t at = out.size();
      out.resize(at + length);
      std::copy_n(out.begin() + static_cast<std::ptrdiff_t>(offset), length,
                  out.begin() + static_cast<std::ptrdiff_t>(at));
      continue;
    }
    const size_t at = out.size();
    encode_chunk(chunk, out);
    if (cache.size() < kMaxCachedChunks) cache.emplace(chunk, std::make_pair(at, out.size() - at));
  }
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  const std::vector<size_t> cuts = split_into_blocks(text, kEncodeBlockBytes);
  const int64_t blocks = static_cast<int64_t>(cuts.size()) - 1;
  if (blocks == 1) {
    std::vector<uint32_t> out;
    encode_block(text, out);
    return out;
  }
  std::vector<std::vector<uint32_t>> parts(static_cast<size_t>(blocks));
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k)
      encode_block(text.substr(cuts[k], cuts[k + 1] - cuts[k]), parts[static_cast<size_t>(k)]);
  });
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  std::vector<uint32_t> out;
  out.reserve(total);
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string Tokenizer::decode(const uint32_t* ids, int64_t n) const {
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    SHAMN_INPUT_CHECK(ids[i] < bytes_.size(), "token id ", ids[i], " at index ", i,
                      " is >= the tokenizer's vocab_size ", vocab_size());
    out += bytes_[ids[i]];
  }
  return out;
}

const std::string& Tokenizer::token_bytes(uint32_t id) const {
  SHAMN_INPUT_CHECK(id < bytes_.size(), "token id ", id, " is >= the tokenizer's vocab_size ", vocab_size());
  return bytes_[id];
}

const std::string& Tokenizer::model_token_bytes(int32_t id) const {
  static const std::string kNothing;
  return id >= 0 && id < vocab_size() ? bytes_[static_cast<size_t>(id)] : kNothing;
}

std::string Tokenizer::model_text(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) out += model_token_bytes(id);
  return out;
}

}  // namespace shamn
