// The inference runtime against the autograd model (the reference), decode
// against prefill, quantised against f32, and the paths against each other.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "autograd/variable.h"
#include "core/kernel_level.h"
#include "core/kernels/activation.h"
#include "core/model_config.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "data/token_file.h"
#include "helpers.h"
#include "infer/evaluate.h"
#include "infer/export_model.h"
#include "infer/infer_model.h"
#include "infer/infer_test_model.h"
#include "infer/lora_test_adapter.h"
#include "infer/quant_dot.h"
#include "infer/quant_tiles.h"
#include "infer/sampler.h"
#include "infer/shq_writer.h"
#include "layers/shamn_model.h"
#include "tests/scratch_dir.h"
#include "train/model_checkpoint.h"

namespace shamn {
namespace {

using test::model_toml;
using test::random_tokens;
using test::TestModel;

std::vector<float> prefill_logits(const InferModel& m, const std::vector<int32_t>& tokens) {
  std::vector<float> out(tokens.size() * static_cast<size_t>(m.vocab_size()));
  DecodeState s = m.new_state();
  m.forward(tokens.data(), static_cast<int64_t>(tokens.size()), s, out.data(), true);
  return out;
}

std::vector<float> decode_logits(const InferModel& m, const std::vector<int32_t>& tokens) {
  const int64_t V = m.vocab_size();
  std::vector<float> out(tokens.size() * static_cast<size_t>(V));
  DecodeState s = m.new_state();
  for (size_t t = 0; t < tokens.size(); ++t) m.forward(&tokens[t], 1, s, out.data() + t * V, false);
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    diff = test::worse(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return diff / scale;
}

// mean |a - b| / mean |b|: routing near-ties in a random model flip an expert
// now and then, which a max-norm would report as a large error.
double mean_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale += std::fabs(static_cast<double>(b[i]));
    diff += std::fabs(static_cast<double>(a[i]) - b[i]);
  }
  return diff / scale;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct KernelGuard {
  KernelLevel saved = kernel_level();
  ~KernelGuard() { set_kernel_level(saved); }
};

}  // namespace

TEST_CASE("f32 runtime logits equal the autograd model's", "[infer][runtime]") {
  for (const std::string& variant : {std::string(""), std::string("tie_head = false\n")}) {
    INFO("variant: " << (variant.empty() ? "tied head" : "untied head"));
    // Biases not zero (init's), so every product's bias path is compared.
    const TestModel tm(model_toml(variant), variant.empty() ? "tied" : "untied", 5, 0.01);
    const InferModel m = tm.runtime(ShqQuant::f32);
    const std::vector<int32_t> tokens = random_tokens(37, tm.config.vocab_size, 1);
    NoGradGuard no_grad;
    const Tensor ref = tm.reference
                           ->logits(Tensor::from_data<int32_t>(
                               {1, 37}, std::span<const int32_t>(tokens.data(), tokens.size())))
                           .value();
    const std::vector<float> want = ref.to_vector<float>();
    CHECK(max_rel_diff(prefill_logits(m, tokens), want) < 1e-5);
    CHECK(max_rel_diff(decode_logits(m, tokens), want) < 1e-5);
  }
}

TEST_CASE("decoding token by token gives the prefill's logits bit for bit", "[infer][runtime]") {
  const TestModel tm(model_toml(), "decode");
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4}) {
    INFO("quant " << shq_quant_name(q));
    const InferModel m = tm.runtime(q);
    const std::vector<int32_t> tokens = random_tokens(23, tm.config.vocab_size, 2);
    const std::vector<float> all = prefill_logits(m, tokens);
    CHECK(bitwise_equal(decode_logits(m, tokens), all));
    // A prefill in two chunks continues from the state the first one left.
    const int64_t V = m.vocab_size();
    std::vector<float> split(all.size());
    DecodeState s = m.new_state();
    m.forward(tokens.data(), 9, s, split.data(), true);
    m.forward(tokens.data() + 9, 14, s, split.data() + 9 * V, true);
    CHECK(bitwise_equal(split, all));
    CHECK(s.position == 23);
    // Only the last row when all_logits is false.
    std::vector<float> last(static_cast<size_t>(V));
    DecodeState s2 = m.new_state();
    m.forward(tokens.data(), 23, s2, last.data(), false);
    CHECK(std::memcmp(last.data(), all.data() + 22 * V, V * sizeof(float)) == 0);
  }
}

TEST_CASE("a long prefill runs in chunks and still equals decoding token by token", "[infer][runtime]") {
  const TestModel tm(model_toml(), "chunks");
  const InferModel m = tm.runtime(ShqQuant::int8);
  // Past two chunk boundaries (256 rows on 1 or 2 threads, infer_model.cpp).
  const std::vector<int32_t> tokens = random_tokens(600, tm.config.vocab_size, 8);
  CHECK(bitwise_equal(prefill_logits(m, tokens), decode_logits(m, tokens)));
}

// Under TSan (.ci/sanitize's filter matches "thread"): the main thread runs
// slices inside libtbb's wait, on stack where oneTBB's bookkeeping of earlier
// loops stood, which TSan skips (core/thread_sanitizer.h).
TEST_CASE("a long prefill cut into row slices (2 and 3 threads) equals decoding token by token",
          "[infer][runtime]") {
  test::ThreadCountGuard threads;
  const TestModel tm(model_toml(), "slices");
  const std::vector<int32_t> tokens = random_tokens(301, tm.config.vocab_size, 9);
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8}) {
    const InferModel m = tm.runtime(q);
    set_num_threads(1);
    const std::vector<float> want = decode_logits(m, tokens);
    // 2 and 3 threads: chunks of 256 and 384 rows cut into slices of at
    // least 32 (infer_model.cpp), with uneven slices and a short last chunk.
    for (int t : {2, 3}) {
      INFO("quant " << shq_quant_name(q) << ", threads " << t);
      set_num_threads(t);
      CHECK(bitwise_equal(prefill_logits(m, tokens), want));
      // The state a sliced prefill leaves decodes on exactly.
      const int64_t V = m.vocab_size(), n = static_cast<int64_t>(tokens.size());
      DecodeState s = m.new_state();
      std::vector<float> last(static_cast<size_t>(V));
      m.forward(tokens.data(), n - 1, s, last.data(), false);
      m.forward(tokens.data() + n - 1, 1, s, last.data(), false);
      CHECK(std::memcmp(last.data(), want.data() + (n - 1) * V, V * sizeof(float)) == 0);
      // forward_losses slices the same way.
      std::vector<double> sliced(static_cast<size_t>(n - 1)), single(sliced.size());
      DecodeState s1 = m.new_state();
      m.forward_losses(tokens.data(), n - 1, s1, tokens.data() + 1, sliced.data());
      set_num_threads(1);
      DecodeState s2 = m.new_state();
      m.forward_losses(tokens.data(), n - 1, s2, tokens.data() + 1, single.data());
      CHECK(std::memcmp(sliced.data(), single.data(), sliced.size() * sizeof(double)) == 0);
    }
  }
}

TEST_CASE("slices are never shorter than the mixer's history, however long the kernel",
          "[infer][runtime][threads]") {
  test::ThreadCountGuard threads;
  // K = 40: every slice after the first reads the 39 rows before it, more than the 32-row
  // minimum slice; 70 and 100 tokens on 2 and 3 threads once made slices starting at row 35 or 33.
  const TestModel tm(model_toml("[model.mixer]\nkernel = 40\n"), "long_kernel");
  const InferModel m = tm.runtime(ShqQuant::f32);
  for (int64_t n : {70, 100, 301}) {
    const std::vector<int32_t> tokens = random_tokens(n, tm.config.vocab_size, 11);
    set_num_threads(1);
    const std::vector<float> want = decode_logits(m, tokens);
    for (int t : {2, 3}) {
      INFO(n << " tokens, threads " << t);
      set_num_threads(t);
      CHECK(bitwise_equal(prefill_logits(m, tokens), want));
    }
  }
}

TEST_CASE("streams decoded together get bitwise the logits each gets alone", "[infer][runtime][threads]") {
  test::ThreadCountGuard guard;
  const TestModel tm(model_toml(), "streams", 5, 0.01);
  // On 2 and 3 threads the decode steps (13 rows) run as 2 and 3 groups of
  // streams, each through whole layers on one thread (infer_model.cpp,
  // streams_grouped). The prompts' pass (67 rows) runs as 3 groups on 3
  // threads; on 2, its stream of 20 rows would leave the groups uneven, and it
  // is split pass by pass.
  const int threads = GENERATE(1, 2, 3);
  set_num_threads(threads);
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4}) {
    INFO("quant " << shq_quant_name(q) << ", threads " << threads);
    const InferModel m = tm.runtime(q);
    const int64_t V = m.vocab_size();
    const std::vector<int64_t> prompt_lengths = {1, 4, 7, 12, 20, 2, 3, 1, 5, 2, 1, 3, 6};
    const size_t B = prompt_lengths.size();
    const int64_t steps = 6;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t b = 0; b < B; ++b) prompts.push_back(random_tokens(prompt_lengths[b], V, 20 + b));
    // Alone: each stream's prompt, then greedy steps; every logit row kept.
    std::vector<std::vector<float>> alone(B);
    for (size_t b = 0; b < B; ++b) {
      DecodeState s = m.new_state();
      std::vector<float> l(static_cast<size_t>(V));
      m.forward(prompts[b].data(), prompt_lengths[b], s, l.data(), false);
      alone[b] = l;
      for (int64_t i = 0; i < steps; ++i) {
        const int32_t next = argmax_logit(l.data(), V);
        m.forward(&next, 1, s, l.data(), false);
        alone[b].insert(alone[b].end(), l.begin(), l.end());
      }
    }
    // Together: all prompts in one ragged pass (stream 2 asks for every row),
    // then every decode step as one batch of B tokens.
    std::vector<DecodeState> states;
    for (size_t b = 0; b < B; ++b) states.push_back(m.new_state());
    std::vector<StreamStep> first;
    int64_t rows = 0;
    for (size_t b = 0; b < B; ++b) {
      first.push_back({&states[b], prompts[b].data(), prompt_lengths[b], b == 2});
      rows += b == 2 ? prompt_lengths[b] : 1;
    }
    std::vector<float> out(static_cast<size_t>(rows * V));
    m.forward(first, out.data());
    std::vector<std::vector<float>> together(B);
    std::vector<int32_t> next(B);
    int64_t r = 0;
    for (size_t b = 0; b < B; ++b) {
      r += b == 2 ? prompt_lengths[b] - 1 : 0;  // stream 2's last row is the one decoding continues from
      together[b].assign(out.begin() + r * V, out.begin() + (r + 1) * V);
      next[b] = argmax_logit(out.data() + r * V, V);
      ++r;
    }
    // Stream 2's earlier rows are its prefill's.
    {
      DecodeState s = m.new_state();
      std::vector<float> all(static_cast<size_t>(prompt_lengths[2] * V));
      m.forward(prompts[2].data(), prompt_lengths[2], s, all.data(), true);
      const int64_t r2 = 2;  // rows of streams 0 and 1 come first
      CHECK(std::memcmp(all.data(), out.data() + r2 * V, all.size() * sizeof(float)) == 0);
    }
    out.resize(B * V);
    for (int64_t i = 0; i < steps; ++i) {
      std::vector<StreamStep> batch;
      for (size_t b = 0; b < B; ++b) batch.push_back({&states[b], &next[b], 1, false});
      if (i == 0) start_profiling();
      m.forward(batch, out.data());
      if (i == 0) {  // the step took the grouped path from 2 threads on
        stop_profiling();
        int64_t grouped = 0;
        for (const ProfileStat& st : profile_report().stats)
          grouped += st.name == "streams.grouped" ? st.calls : 0;
        CHECK(grouped == (threads > 1 ? 1 : 0));
      }
      for (size_t b = 0; b < B; ++b) {
        together[b].insert(together[b].end(), out.begin() + b * V, out.begin() + (b + 1) * V);
        next[b] = argmax_logit(out.data() + b * V, V);
      }
    }
    for (size_t b = 0; b < B; ++b) {
      INFO("stream " << b);
      CHECK(bitwise_equal(together[b], alone[b]));
      CHECK(states[b].position == prompt_lengths[b] + steps);
    }
    // One state in two streams of a batch is refused.
    StreamStep twice[2] = {{&states[0], next.data(), 1, false}, {&states[0], next.data(), 1, false}};
    CHECK_THROWS_WITH(m.forward(twice, out.data()), Catch::Contains("share one decode state"));
  }
}

TEST_CASE("a token's logits depend only on the receptive field, so decode is O(1) in context",
          "[infer][runtime]") {
  const TestModel tm(model_toml(), "field");
  const InferModel m = tm.runtime(ShqQuant::int8);
  const int64_t R = tm.config.n_layers * (tm.config.mixer_kernel - 1) + 1;
  const int64_t V = m.vocab_size();
  std::vector<int32_t> tokens = random_tokens(40, V, 3);
  const std::vector<float> full = prefill_logits(m, tokens);
  const std::vector<int32_t> window(tokens.end() - R, tokens.end());
  const std::vector<float> w = prefill_logits(m, window);
  CHECK(std::memcmp(w.data() + (R - 1) * V, full.data() + 39 * V, V * sizeof(float)) == 0);
  // One token fewer than the receptive field changes the result.
  const std::vector<int32_t> short_window(tokens.end() - (R - 1), tokens.end());
  const std::vector<float> sw = prefill_logits(m, short_window);
  CHECK(std::memcmp(sw.data() + (R - 2) * V, full.data() + 39 * V, V * sizeof(float)) != 0);
}

TEST_CASE("quantised runtimes stay close to f32", "[infer][runtime]") {
  const TestModel tm(model_toml(), "close");
  const std::vector<int32_t> tokens = random_tokens(64, tm.config.vocab_size, 4);
  const std::vector<float> f32 = prefill_logits(tm.runtime(ShqQuant::f32), tokens);
  const double e8 = mean_rel_diff(prefill_logits(tm.runtime(ShqQuant::int8), tokens), f32);
  const double e4 = mean_rel_diff(prefill_logits(tm.runtime(ShqQuant::int4), tokens), f32);
  INFO("int8 " << e8 << ", int4 " << e4);
  CHECK(e8 < 0.05);  // measured 0.022
  CHECK(e4 < 0.6);   // measured 0.30 (random weights, amplified gains)
  CHECK(e8 < e4);
}

// The same file with every quantised tensor dequantised back to f32.
InferModel dequantised_copy(const InferModel& m) {
  ShqWriter w(ShqQuant::f32, m.file().config_toml(), m.file().tokenizer_text(), 0);
  for (const ShqTensor& t : m.file().tensors()) {
    if (!shq_dtype_quantized(t.dtype)) {
      const auto* p = static_cast<const uint8_t*>(t.data);
      w.add(t.name, t.dtype, t.shape, std::vector<uint8_t>(p, p + t.bytes));
      continue;
    }
    // Segments of `cols` values, each its own blocks; a tiled tensor's rows
    // (t.shape[0] or nob * b) hold several segments.
    const int64_t cols = t.shape.back(), segments = shape_numel(t.shape) / cols, sb = quant_blocks(cols);
    const int64_t tile_rows = t.shape.size() == 4 ? t.shape[0] * t.shape[1] : t.shape[0];
    const int64_t per_row = segments / tile_rows;
    std::vector<uint8_t> out(static_cast<size_t>(segments * cols) * sizeof(float));
    auto* f = reinterpret_cast<float*>(out.data());
    for (int64_t s = 0; s < segments; ++s) {
      std::vector<BlockQ8> b8(static_cast<size_t>(sb));
      std::vector<BlockQ4> b4(static_cast<size_t>(sb));
      for (int64_t j = 0; j < sb; ++j) {
        const int64_t r = s / per_row, jr = s % per_row * sb + j;
        if (t.dtype == ShqDType::q8_0) b8[j] = static_cast<const BlockQ8*>(t.data)[s * sb + j];
        if (t.dtype == ShqDType::q4_0) b4[j] = static_cast<const BlockQ4*>(t.data)[s * sb + j];
        if (t.dtype == ShqDType::q8_0x16)
          b8[j] = tile_block(static_cast<const TileQ8*>(t.data), per_row * sb, r, jr);
        if (t.dtype == ShqDType::q4_0x16)
          b4[j] = tile_block(static_cast<const TileQ4*>(t.data), per_row * sb, r, jr);
      }
      if (t.dtype == ShqDType::q8_0 || t.dtype == ShqDType::q8_0x16)
        dequantize_row_q8(b8.data(), f + s * cols, cols);
      else
        dequantize_row_q4(b4.data(), f + s * cols, cols);
    }
    w.add(t.name, ShqDType::f32, t.shape, std::move(out));
  }
  const std::vector<uint8_t> image = w.image();
  return InferModel(ShqFile::from_bytes(image.data(), image.size(), "dequantised"));
}

TEST_CASE("quantised kernels compute what the dequantised weights compute in f32", "[infer][runtime]") {
  // Isolates the integer kernels and layouts from the weight rounding: the
  // only difference left is the activations' 8-bit rounding.
  const TestModel tm(model_toml(), "dequant");
  const std::vector<int32_t> tokens = random_tokens(64, tm.config.vocab_size, 4);
  for (ShqQuant q : {ShqQuant::int8, ShqQuant::int4}) {
    const InferModel m = tm.runtime(q);
    const double e = mean_rel_diff(prefill_logits(m, tokens), prefill_logits(dequantised_copy(m), tokens));
    INFO("quant " << shq_quant_name(q) << ": " << e);
    CHECK(e < 0.03);
  }
}

TEST_CASE("runtime results do not depend on the kernel path or the thread count", "[infer][runtime]") {
  KernelGuard kernel;
  test::ThreadCountGuard threads;
  // Block 16: sparse rows are padded quantisation segments.
  for (const std::string& block : {std::string("32"), std::string("16")}) {
    std::string toml = model_toml();
    toml.replace(toml.find("block = 32"), 10, "block = " + block);
    const TestModel tm(toml, "paths" + block, 5, 0.01);
    for (ShqQuant q : {ShqQuant::int8, ShqQuant::int4}) {
      INFO("block " << block << ", quant " << shq_quant_name(q));
      const InferModel m = tm.runtime(q);
      const std::vector<int32_t> tokens = random_tokens(19, tm.config.vocab_size, 5);
      set_num_threads(1);
      set_kernel_level(KernelLevel::scalar);
      const std::vector<float> ref = prefill_logits(m, tokens);
      for (KernelLevel k : {KernelLevel::avx2, KernelLevel::avx512}) {
        if (!kernel_level_supported(k)) continue;
        set_kernel_level(k);
        for (int t : {1, 2}) {
          set_num_threads(t);
          INFO("kernel " << kernel_level_name(k) << ", threads " << t);
          CHECK(bitwise_equal(prefill_logits(m, tokens), ref));
        }
      }
    }
  }
}

TEST_CASE("export keeps norms, biases, importance and indices as trained and quantises the matrices",
          "[infer][export]") {
  ModelConfig c;  // block 32, tied head
  ModelConfig untied_block8 = c;
  untied_block8.tie_head = false;
  untied_block8.block = 8;
  // Matrices multiplied by activations are tiled; those only read by rows are not.
  CHECK(export_dtype("layers.0.mixer.out.values", ShqQuant::int8, c) == ShqDType::q8_0x16);
  CHECK(export_dtype("layers.0.moe.experts.3.up.values", ShqQuant::int4, c) == ShqDType::q4_0x16);
  CHECK(export_dtype("layers.1.memory.query.weight", ShqQuant::int8, c) == ShqDType::q8_0x16);
  CHECK(export_dtype("layers.1.memory.keys1", ShqQuant::int4, c) == ShqDType::q4_0x16);
  CHECK(export_dtype("layers.1.memory.values", ShqQuant::int4, c) == ShqDType::q4_0);
  CHECK(export_dtype("layers.1.memory.values", ShqQuant::int8, c) == ShqDType::q8_0);
  CHECK(export_dtype("embed.table", ShqQuant::int4, c) == ShqDType::q8_0x16);
  CHECK(export_dtype("embed.table", ShqQuant::int8, untied_block8) == ShqDType::q8_0);
  CHECK(export_dtype("head.weight", ShqQuant::int4, untied_block8) == ShqDType::q8_0x16);
  // A block that is not a multiple of 16 rows keeps block-sparse values row-major.
  CHECK(export_dtype("layers.0.mixer.out.values", ShqQuant::int8, untied_block8) == ShqDType::q8_0);
  CHECK(export_dtype("layers.0.moe.router_group.weight", ShqQuant::int4, c) == ShqDType::q8_0x16);
  CHECK(export_dtype("embed.table", ShqQuant::f32, c) == ShqDType::f32);
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4}) {
    CHECK(export_dtype("embed.importance", q, c) == ShqDType::f32);
    CHECK(export_dtype("layers.0.mix_norm.gain", q, c) == ShqDType::f32);
    CHECK(export_dtype("layers.0.mixer.conv", q, c) == ShqDType::f32);
    CHECK(export_dtype("layers.0.mixer.out.bias", q, c) == ShqDType::f32);
    CHECK(export_dtype("layers.0.mixer.out.col_index", q, c) == ShqDType::i32);
    CHECK(export_dtype("embed.bucket_index", q, c) == ShqDType::i32);
  }
  const TestModel tm(model_toml(), "export");
  const InferModel m = tm.runtime(ShqQuant::int8);
  CHECK(m.file().header().step == 42);
  CHECK(m.config().to_toml() == tm.config.to_toml());
  CHECK_FALSE(m.tokenizer().has_value());
  // Every checkpoint tensor is in the file, under its SPEC name.
  for (const NamedVar& p : tm.reference->named_parameters()) CHECK(m.file().has_tensor(p.name));
  CHECK(m.file().tensors().size() ==
        tm.reference->named_parameters().size() + tm.reference->named_buffers().size());
  CHECK(m.weight_bytes_per_token() < m.weight_bytes());
  // Data is 64-byte aligned in the file.
  for (const ShqTensor& t : m.file().tensors()) CHECK(reinterpret_cast<uintptr_t>(t.data) % 64 == 0);
}

TEST_CASE("a decoded token's bytes count its own importances and bucket indices, tied head or not",
          "[infer][export]") {
  const TestModel tied(model_toml("tie_head = true\n"), "bytes_tied");
  const TestModel untied(model_toml("tie_head = false\n"), "bytes_untied");
  const int64_t V = 300, D = 64, buckets = 40, h = tied.config.embed().hashes;
  // f32 heads: tied, the [buckets, D] table and every token's h importances and
  // h bucket indices (4 bytes each); untied, [V, D] and the input token's h of each.
  const int64_t tied_head = buckets * D * 4 + V * h * 8, untied_head = V * D * 4 + h * 8;
  const auto per_token = [](const TestModel& m) {
    return static_cast<int64_t>(m.runtime(ShqQuant::f32).weight_bytes_per_token());
  };
  CHECK(per_token(untied) - per_token(tied) == untied_head - tied_head);
}

TEST_CASE("export embeds the tokenizer and writes the file atomically", "[infer][export]") {
  const TestModel tm(model_toml(), "tokenizer");
  ExportOptions o;
  o.quant = ShqQuant::int4;
  o.tokenizer_text = Tokenizer::train("the cat sat on the mat, the cat sat on the hat", 270).to_text();
  const std::string out = tm.dir + "/model.shq";
  export_model(tm.checkpoint, o, out);
  const InferModel m(ShqFile::open(out));
  REQUIRE(m.tokenizer().has_value());
  CHECK(m.tokenizer()->to_text() == o.tokenizer_text);
  // A failing export leaves the previous file as it was and no temporary file.
  const auto before = std::filesystem::file_size(out);
  CHECK_THROWS_AS(export_model(tm.dir + "/missing.h5", o, out), InputError);
  CHECK(std::filesystem::file_size(out) == before);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(tm.dir)) files += e.is_regular_file();
  CHECK(files == 2);  // model.h5 and model.shq
}

TEST_CASE("argmax_logit finds the first maximum, never a NaN", "[infer][sampler]") {
  Rng rng(9);
  for (int64_t n = 1; n <= 70; ++n)
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> l(static_cast<size_t>(n));
      // Few distinct values, so ties are common; some NaN and -inf.
      for (float& v : l) {
        const uint64_t r = rng.below(10);
        v = r == 0 ? std::nanf("") : r == 1 ? -INFINITY : static_cast<float>(rng.below(4));
      }
      if (trial == 0) std::fill(l.begin(), l.end(), std::nanf(""));
      int64_t want = -1;
      for (int64_t v = 0; v < n; ++v)
        if (!std::isnan(l[v]) && (want < 0 || l[v] > l[want])) want = v;
      INFO("n " << n << ", trial " << trial);
      CHECK(argmax_logit(l.data(), n) == std::max<int64_t>(want, 0));
    }
}

TEST_CASE("top-k candidates are the likeliest k, ties to the lower id, never a NaN", "[infer][sampler]") {
  Rng rng(11);
  for (int64_t V : {8, 17, 70, 1000, 2559, 2560, 32000})
    for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{40}, int64_t{100}, int64_t{128},
                      int64_t{129}, V / 8, V / 2, V})
      for (int trial = 0; trial < 5; ++trial) {
        if (k < 1 || k > V) continue;
        // Few distinct values (trial 0, 1), so ties are common (-0 among the
        // zeros, which it equals), or many; some -inf. The scan starts at a
        // floor taken from group maxima where V >= 32 * 8 * G / 8 (G about 2k,
        // k up to 128; k = 40: from V = 2,560), which ties often meet.
        std::vector<float> l(static_cast<size_t>(V));
        for (float& v : l) {
          const uint64_t r = rng.below(20);
          v = r == 0      ? -INFINITY
              : r == 1    ? -0.0f
              : trial < 2 ? static_cast<float>(rng.below(6))
                          : static_cast<float>(rng.normal());
        }
        // Trial 4: four tokens above -inf (one +inf), the rest -inf: most group
        // maxima are -inf, so for k > 4 there is no floor.
        if (trial == 4) {
          std::fill(l.begin(), l.end(), -INFINITY);
          l[static_cast<size_t>(V / 3)] = 1.0f;
          l[static_cast<size_t>(V / 2)] = INFINITY;
          l[static_cast<size_t>(V - 1)] = 1.0f;
          l[0] = -2.0f;
        }
        // With NaNs (trial 3): the likeliest k of the other tokens. k up to V / 8
        // takes the sampler's one-pass selection, above it a sort.
        if (trial == 3)
          for (int64_t v = 0; v < V; v += 3) l[v] = std::nanf("");
        std::vector<int32_t> want;
        for (int32_t v = 0; v < V; ++v)
          if (!std::isnan(l[v])) want.push_back(v);
        const int64_t kept = std::min<int64_t>(k, static_cast<int64_t>(want.size()));
        std::partial_sort(want.begin(), want.begin() + kept, want.end(),
                          [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
        want.resize(static_cast<size_t>(kept));
        SamplingOptions o;
        o.temperature = 1.0;
        o.top_k = k;
        o.top_p = 1.0;
        TokenDistribution d;
        Sampler(o).distribution(l.data(), V, d);
        INFO("V " << V << ", k " << k << ", trial " << trial);
        CHECK(d.tokens == want);
      }
}

TEST_CASE("penalties and logit_bias change the logits each draw sees, as OpenAI defines them",
          "[infer][sampler]") {
  const int64_t V = 40;
  std::vector<float> logits(V);
  Rng rng(5);
  for (float& l : logits) l = static_cast<float>(rng.normal());
  for (const double temperature : {0.0, 0.9}) {
    SamplingOptions o;
    o.temperature = temperature;
    o.top_k = 10;
    o.seed = 21;
    o.frequency_penalty = 0.7;
    o.presence_penalty = -0.3;
    o.logit_bias = {{3, 5.0f}, {11, -100.0f}};
    // The reference: a plain sampler of the same seed drawing from logits
    // adjusted by hand, mu[j] - c[j] * frequency - (c[j] > 0) * presence + bias[j].
    SamplingOptions plain = o;
    plain.frequency_penalty = plain.presence_penalty = 0;
    plain.logit_bias.clear();
    Sampler penalised(o), reference(plain);
    std::vector<int64_t> counts(V);
    std::vector<int32_t> got, want;
    for (int i = 0; i < 60; ++i) {
      std::vector<float> adjusted = logits;
      adjusted[3] += 5.0f;
      adjusted[11] += -100.0f;
      for (int64_t j = 0; j < V; ++j)
        if (counts[j] > 0) adjusted[j] -= static_cast<float>(counts[j] * 0.7 + -0.3);
      want.push_back(reference.sample(adjusted.data(), V));
      got.push_back(penalised.sample(logits.data(), V));
      ++counts[want.back()];
    }
    INFO("temperature " << temperature);
    CHECK(got == want);
    CHECK(std::count(got.begin(), got.end(), 11) == 0);  // banned
    // The frequency penalty spreads the draws: greedy alone would repeat one token.
    CHECK(std::set<int32_t>(got.begin(), got.end()).size() > 3);
  }
  // Greedy picks a token a bias lifts above the rest.
  SamplingOptions lift;
  lift.temperature = 0;
  lift.logit_bias = {{29, 100.0f}};
  CHECK(Sampler(lift).sample(logits.data(), V) == 29);
  // Out of range, twice, or past the vocabulary: refused.
  SamplingOptions bad = lift;
  bad.frequency_penalty = 2.5;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("--frequency-penalty 2.5 must be in [-2, 2]"));
  bad = lift;
  bad.logit_bias = {{1, 101.0f}};
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("the bias in [-100, 100]"));
  bad.logit_bias = {{1, NAN}};
  CHECK_THROWS_AS(bad.validate(), InputError);
  bad.logit_bias = {{4, 1.0f}, {2, 1.0f}, {4, -1.0f}};
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("names token 4 twice"));
  bad.logit_bias = {{40, 1.0f}};
  CHECK_NOTHROW(bad.validate());
  CHECK_THROWS_WITH(bad.check_vocabulary(V),
                    Catch::Contains("names token 40, outside the model's vocabulary"));
  CHECK_THROWS_AS(Sampler(bad).sample(logits.data(), V), InputError);
}

TEST_CASE("sampling is deterministic per seed and greedy at temperature 0", "[infer][sampler]") {
  const int64_t V = 50;
  std::vector<float> logits(V);
  Rng rng(3);
  for (float& l : logits) l = static_cast<float>(rng.normal());
  logits[17] = 4.0f;
  auto draw = [&](SamplingOptions o, int n) {
    Sampler s(o);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(s.sample(logits.data(), V));
    return out;
  };
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_k = 0;
  o.top_p = 1.0;
  o.seed = 9;
  CHECK(draw(o, 200) == draw(o, 200));
  SamplingOptions other = o;
  other.seed = 10;
  CHECK(draw(o, 200) != draw(other, 200));
  // Greedy, top-k 1 and a tiny top-p all pick the argmax.
  SamplingOptions greedy = o;
  greedy.temperature = 0.0;
  CHECK(draw(greedy, 5) == std::vector<int32_t>(5, 17));
  SamplingOptions k1 = o;
  k1.top_k = 1;
  CHECK(draw(k1, 5) == std::vector<int32_t>(5, 17));
  SamplingOptions p0 = o;
  p0.top_p = 1e-6;
  CHECK(draw(p0, 5) == std::vector<int32_t>(5, 17));
  // top-k 3 only ever draws the three likeliest.
  SamplingOptions k3 = o;
  k3.top_k = 3;
  std::vector<int32_t> order(V);
  for (int i = 0; i < V; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  for (int32_t t : draw(k3, 300)) CHECK((t == order[0] || t == order[1] || t == order[2]));
  // Frequencies follow softmax(logits / T) (T = 1, no cuts): the argmax's share.
  int hits = 0;
  for (int32_t t : draw(o, 4000)) hits += t == 17;
  double z = 0.0;
  for (float l : logits) z += std::exp(l - 4.0);
  CHECK(std::fabs(hits / 4000.0 - 1.0 / z) < 0.03);
  // An infinite logit takes all the mass (shared by the tokens at +inf); before,
  // inf - inf made every weight NaN and the draw fell to the last candidate.
  std::vector<float> inf = logits;
  inf[5] = inf[30] = INFINITY;
  for (const int64_t k : {int64_t{0}, int64_t{3}}) {
    SamplingOptions ok = o;
    ok.top_k = k;
    Sampler s(ok);
    std::vector<int> seen(V);
    for (int i = 0; i < 200; ++i) ++seen[s.sample(inf.data(), V)];
    CHECK(seen[5] + seen[30] == 200);
    CHECK(seen[5] > 50);
    CHECK(seen[30] > 50);
  }
  SamplingOptions bad = o;
  bad.top_p = 0.0;
  CHECK_THROWS_AS(Sampler(bad), InputError);
  bad = o;
  bad.temperature = -1.0;
  CHECK_THROWS_AS(Sampler(bad), InputError);
  // An empty vocabulary has no token to give, greedy or sampled.
  SamplingOptions first_max = o;
  first_max.temperature = 0.0;
  for (const SamplingOptions& e : {o, first_max}) {
    Sampler s(e);
    CHECK_THROWS_WITH(s.sample(logits.data(), 0), Catch::Contains("at least one token"));
    TokenDistribution d;
    CHECK_THROWS_WITH(s.distribution(logits.data(), 0, d), Catch::Contains("at least one token"));
  }
  CHECK_THROWS_WITH(argmax_logit(logits.data(), 0), Catch::Contains("at least one token"));
}

}  // namespace shamn

namespace shamn {

TEST_CASE("evaluate's loss is the autograd cross-entropy over the same windows, KL against itself is 0",
          "[infer][eval]") {
  const TestModel tm(model_toml(), "eval");
  const int64_t V = tm.config.vocab_size, T = 16, W = 3;
  const std::vector<int32_t> stream = random_tokens(W * T + 5, V, 6);
  const std::string data = tm.dir + "/val.bin";
  write_token_file(data, std::vector<uint32_t>(stream.begin(), stream.end()));
  const TokenFile file(data);
  const InferModel m = tm.runtime(ShqQuant::f32);
  const LogitFunction f = [&](const int32_t* tokens, int64_t n, float* logits) {
    DecodeState s = m.new_state();
    m.forward(tokens, n, s, logits, true);
  };
  const EvalResult r = evaluate(file, V, T, 0, f, &f);
  CHECK(r.windows == W);
  CHECK(r.tokens == W * T);
  CHECK(r.mean_kl == Approx(0.0).margin(1e-12));
  CHECK(r.top1_agreement == 1.0);
  CHECK(r.reference_loss == r.loss);

  Tensor inputs = Tensor::empty({W, T}, DType::i32), targets = Tensor::empty({W, T}, DType::i32);
  for (int64_t w = 0; w < W; ++w)
    for (int64_t t = 0; t < T; ++t) {
      inputs.data<int32_t>()[w * T + t] = stream[w * T + t];
      targets.data<int32_t>()[w * T + t] = stream[w * T + t + 1];
    }
  NoGradGuard no_grad;
  const double ce = tm.reference->loss(inputs, targets).ce.value().item();
  CHECK(r.loss == Approx(ce).epsilon(1e-5));
  CHECK(evaluate(file, V, T, 2, f).windows == 2);
  CHECK_THROWS_AS(evaluate(file, V, 1000, 0, f), InputError);
}

TEST_CASE("evaluate's KL is KL(reference || model) and its top-1 agreement counts equal argmaxes",
          "[infer][eval]") {
  // Two made-up models over V = 3 whose logits depend on a position's token and
  // index, so the argmaxes agree at some positions only and the KL is asymmetric.
  const int64_t V = 3, T = 8, W = 4;
  const std::vector<int32_t> stream = random_tokens(W * T + 1, V, 21);
  const std::string data = (test::scratch_dir("eval_kl") / "val.bin").string();
  write_token_file(data, std::vector<uint32_t>(stream.begin(), stream.end()));
  const auto model_row = [](int32_t tok, int64_t t, double* z) {
    z[0] = 0.3 * tok;
    z[1] = 1.0 - 0.4 * static_cast<double>(t % 3);
    z[2] = 0.1 - 0.5 * tok;
  };
  const auto reference_row = [](int32_t tok, int64_t t, double* z) {
    z[0] = 1.0;
    z[1] = 0.2 * static_cast<double>(t % 2);
    z[2] = 0.7 * tok;
  };
  const auto as_logits = [&](auto row) {
    return LogitFunction([row, V](const int32_t* tokens, int64_t n, float* logits) {
      double z[3];
      for (int64_t t = 0; t < n; ++t) {
        row(tokens[t], t, z);
        for (int64_t v = 0; v < V; ++v) logits[t * V + v] = static_cast<float>(z[v]);
      }
    });
  };
  const LogitFunction model = as_logits(model_row), reference = as_logits(reference_row);
  // The sums written out in double, from the float logits each function gives.
  double kl = 0, agree = 0, loss = 0, reference_loss = 0;
  for (int64_t w = 0; w < W; ++w)
    for (int64_t t = 0; t < T; ++t) {
      double zm[3], zr[3], lm[3], lr[3];
      model_row(stream[w * T + t], t, zm);
      reference_row(stream[w * T + t], t, zr);
      double sm = 0, sr = 0;
      for (int v = 0; v < 3; ++v) {
        sm += std::exp(static_cast<float>(zm[v]));
        sr += std::exp(static_cast<float>(zr[v]));
      }
      for (int v = 0; v < 3; ++v) {
        lm[v] = static_cast<float>(zm[v]) - std::log(sm);
        lr[v] = static_cast<float>(zr[v]) - std::log(sr);
        kl += std::exp(lr[v]) * (lr[v] - lm[v]);
      }
      agree += std::max_element(zm, zm + 3) - zm == std::max_element(zr, zr + 3) - zr ? 1 : 0;
      loss -= lm[stream[w * T + t + 1]];
      reference_loss -= lr[stream[w * T + t + 1]];
    }
  const double n = static_cast<double>(W * T);
  REQUIRE(agree > 0);
  REQUIRE(agree < n);
  const EvalResult r = evaluate(TokenFile(data), V, T, 0, model, &reference);
  CHECK(r.tokens == W * T);
  CHECK(r.mean_kl == Approx(kl / n).epsilon(1e-5));
  CHECK(r.top1_agreement == agree / n);
  CHECK(r.loss == Approx(loss / n).epsilon(1e-5));
  CHECK(r.reference_loss == Approx(reference_loss / n).epsilon(1e-5));
}

TEST_CASE("evaluate runs windows concurrently, one a thread, with the loss one at a time gives",
          "[infer][eval]") {
  test::ThreadCountGuard threads;
  const TestModel tm(model_toml(), "eval_concurrent");
  // 11 windows of 40 rows: on 2 threads a round of 8 and a round of 3; on 3,
  // one round of 11. One window at a time on 2 or 3 threads splits its
  // operations (40 rows are too few to cut into slices of 32).
  const int64_t V = tm.config.vocab_size, T = 40, W = 11;
  const std::vector<int32_t> stream = random_tokens(W * T + 1, V, 12);
  const std::string data = tm.dir + "/val.bin";
  write_token_file(data, std::vector<uint32_t>(stream.begin(), stream.end()));
  const TokenFile file(data);
  double bare_loss = 0;
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8})
    for (bool with_adapter : {false, true}) {
      const InferModel m = tm.runtime(q);
      // The adapter on every adaptable matrix (experts and dense ones), read by
      // every window at once.
      const std::optional<LoraAdapter> adapter =
          with_adapter ? std::optional<LoraAdapter>(test::load_adapter(m, test::Spec{})) : std::nullopt;
      const LoraAdapter* a = adapter ? &*adapter : nullptr;
      const LossFunction f = [&](const int32_t* tokens, int64_t n, const int32_t* targets, double* losses) {
        DecodeState s = m.new_state();
        m.forward_losses(tokens, n, s, targets, losses, a);
      };
      set_num_threads(1);
      const EvalResult want = evaluate(file, V, T, 0, f);
      if (with_adapter) CHECK(want.loss != bare_loss);  // the adapter takes part
      bare_loss = want.loss;
      for (int t : {2, 3}) {
        INFO("quant " << shq_quant_name(q) << ", adapter " << with_adapter << ", threads " << t);
        set_num_threads(t);
        const EvalResult one_at_a_time = evaluate(file, V, T, 0, f);
        const EvalResult concurrent = evaluate(file, V, T, 0, f, t);
        CHECK(one_at_a_time.loss == want.loss);
        CHECK(concurrent.loss == want.loss);
        CHECK(concurrent.windows == W);
        CHECK(concurrent.tokens == W * T);
        CHECK(evaluate(file, V, T, 5, f, t).loss == evaluate(file, V, T, 5, f).loss);
      }
    }
}

TEST_CASE("concurrent evaluation hands each window to the model once, on any thread count, in window order",
          "[infer][eval]") {
  test::ThreadCountGuard threads;
  const std::string dir = test::scratch_dir("eval_order").string();
  // Token i of the file is i, so a window's first token names it.
  const int64_t T = 7, W = 10, V = W * T + 1;
  std::vector<uint32_t> stream(static_cast<size_t>(V));
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<uint32_t>(i);
  write_token_file(dir + "/val.bin", stream);
  const TokenFile file(dir + "/val.bin");
  // Losses of very different sizes, so another summation order gives other bits.
  const auto loss_of = [](int64_t i) {
    const double frac = std::fmod(0.6180339887 * static_cast<double>(i), 1.0);
    return std::ldexp(1.0 + frac, static_cast<int>((i * 13) % 80) - 40);
  };
  double in_order = 0, reversed = 0, by_window = 0;
  for (int64_t i = 0; i < W * T; ++i) in_order += loss_of(i);
  for (int64_t i = W * T - 1; i >= 0; --i) reversed += loss_of(i);
  for (int64_t w = 0; w < W; ++w) {
    double window = 0;
    for (int64_t t = 0; t < T; ++t) window += loss_of(w * T + t);
    by_window += window;
  }
  REQUIRE(in_order != reversed);
  REQUIRE(in_order != by_window);

  std::vector<std::atomic<int>> calls(static_cast<size_t>(W));
  std::atomic<int> alone_on_a_thread{0};  // calls inside a SerialScope: windows run concurrently
  const LossFunction f = [&](const int32_t* tokens, int64_t n, const int32_t* targets, double* losses) {
    const int64_t w = tokens[0] / T;
    calls[static_cast<size_t>(w)].fetch_add(1);
    if (in_serial_scope()) alone_on_a_thread.fetch_add(1);
    for (int64_t t = 0; t < n; ++t) {
      losses[t] = tokens[t] == w * T + t && targets[t] == tokens[t] + 1 ? loss_of(tokens[t]) : 1e300;
    }
  };
  for (int t : {1, 2, 3}) {
    INFO("threads " << t);
    set_num_threads(t);
    for (auto& c : calls) c = 0;
    alone_on_a_thread = 0;
    const EvalResult r = evaluate(file, V, T, 0, f, t);
    CHECK(r.windows == W);
    CHECK(r.loss == in_order / static_cast<double>(W * T));
    for (int64_t w = 0; w < W; ++w) CHECK(calls[static_cast<size_t>(w)] == 1);
    // On 2 threads rounds of 8 and 2 windows, on 3 one of 10: every window
    // runs beside others; on 1 thread each runs alone, with the loops free.
    CHECK(alone_on_a_thread == (t == 1 ? 0 : W));
  }

  // Windows 3 and 5 fail. Where threads share the round, window 0 waits (up to
  // two seconds, never on 1 thread) until window 5 has run, so window 5 fails
  // first in time; the error raised is window 3's all the same. The wait only
  // makes a first-in-time error likely to show; the test's outcome does not
  // depend on it.
  std::atomic<bool> five_ran{false}, wait_for_five{false};
  const LossFunction failing = [&](const int32_t* tokens, int64_t n, const int32_t* targets, double* losses) {
    const int64_t w = tokens[0] / T;
    if (w == 0 && wait_for_five) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!five_ran && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }
    if (w == 5) five_ran = true;
    if (w == 3 || w == 5) throw InputError("window " + std::to_string(w) + " failed");
    f(tokens, n, targets, losses);
  };
  for (int t : {1, 2, 3}) {
    INFO("threads " << t);
    set_num_threads(t);
    five_ran = false;
    wait_for_five = t > 1;
    CHECK_THROWS_WITH(evaluate(file, V, T, 0, failing, t), "window 3 failed");
    // Windows 5 and on also hold tokens over a vocabulary of 40 (token i of the
    // file is i): window 3's model error still comes first, as one at a time
    // (window 5 now fails as it is read, so window 0 does not wait for it).
    wait_for_five = false;
    CHECK_THROWS_WITH(evaluate(file, 40, T, 0, failing, t), "window 3 failed");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("forward_losses gives each position's logsumexp minus its target logit, without the logits",
          "[infer][eval]") {
  for (bool tied : {true, false}) {
    const TestModel tm(model_toml(tied ? "" : "tie_head = false\n"), tied ? "losses_tied" : "losses_untied");
    const int64_t V = tm.config.vocab_size, n = 300;  // over one 256-token chunk
    const std::vector<int32_t> tokens = random_tokens(n + 1, V, 8);
    for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8}) {
      INFO("tied " << tied << ", quant " << shq_quant_name(q));
      const InferModel m = tm.runtime(q);
      const std::vector<float> logits =
          prefill_logits(m, std::vector<int32_t>(tokens.begin(), tokens.end() - 1));
      std::vector<double> losses(static_cast<size_t>(n));
      DecodeState state = m.new_state();
      m.forward_losses(tokens.data(), n, state, tokens.data() + 1, losses.data());
      CHECK(state.position == n);
      for (int64_t t = 0; t < n; ++t) {
        const float* row = logits.data() + t * V;
        const double want = logsumexp(row, V) - row[tokens[t + 1]];
        INFO("position " << t);
        // Tied: the fused kernel sums the exps in another order (float lanes).
        CHECK(losses[t] == Approx(want).epsilon(1e-5));
      }
      const std::vector<int32_t> bad(static_cast<size_t>(n), static_cast<int32_t>(V));
      DecodeState s2 = m.new_state();
      CHECK_THROWS_AS(m.forward_losses(tokens.data(), n, s2, bad.data(), losses.data()), InputError);
    }
  }
}

}  // namespace shamn
