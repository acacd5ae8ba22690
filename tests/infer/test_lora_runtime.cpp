// LoRA adapters in the inference runtime (infer/lora_adapter.h): loading and
// its refusals, the zero adapter, a dense adapter against its weights folded
// into the base, mixed batches, and export --merge.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>

#include "core/check.h"
#include "core/checksum.h"
#include "core/hdf5_file.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor_checksum.h"
#include "helpers.h"
#include "infer/export_model.h"
#include "infer/few_rows_q8.h"
#include "infer/infer_model.h"
#include "infer/infer_test_model.h"
#include "infer/lora_adapter.h"
#include "infer/lora_test_adapter.h"
#include "infer/quant_blocks.h"
#include "infer/shq_writer.h"
#include "layers/lora.h"
#include "layers/shamn_model.h"
#include "train/adapter_checkpoint.h"
#include "train/model_checkpoint.h"

namespace shamn {
namespace {

using test::adaptable;
using test::adapter_image;
using test::factors;
using test::load_adapter;
using test::model_toml;
using test::random_tokens;
using test::same_bits;
using test::Spec;
using test::TestModel;
// Biases that are not zero (init's): the term goes between a product and its bias.
constexpr double kBiasWidth = 0.01;

std::vector<float> logits_with(const InferModel& m, const std::vector<int32_t>& tokens,
                               const LoraAdapter* a) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<float> out(static_cast<size_t>(n * m.vocab_size()));
  DecodeState s = m.new_state();
  StreamStep step{&s, tokens.data(), n, true};
  step.adapter = a;
  m.forward(std::span(&step, 1), out.data());
  return out;
}

double mean_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += std::fabs(static_cast<double>(a[i]) - b[i]);
    den += std::fabs(static_cast<double>(b[i]));
  }
  return num / den;
}

// A LoRA run's checkpoint on tm's base: adapters on `lora`'s targets with B
// random, so they matter. `adapted` becomes the same model in autograd.
std::string write_adapter_checkpoint(const TestModel& tm, const LoraOptions& lora, Shamn& adapted,
                                     const std::string& file) {
  load_model_tensors(Hdf5Reader(tm.checkpoint), adapted);
  attach_lora(adapted, tm.config, lora);
  init_lora_adapters(adapted, 3);
  for (NamedVar& p : lora_parameters(adapted))
    if (p.name.ends_with("lora_b")) {
      Rng rng(4, std::hash<std::string>{}(p.name));
      Tensor v = p.var.value();
      rng.fill_uniform(v, -0.3, 0.3);
    }
  const std::string path = tm.dir + "/" + file;
  Hdf5Writer w(path, "checkpoint");
  write_model_tensors(w, adapted, TensorSet::adapters);
  write_adapter_identity(w, AdapterIdentity{base_checksum(adapted), tm.checkpoint, lora});
  w.set_string_attribute("config", tm.config.to_toml());
  w.set_int_attribute("format_version", 1);
  w.set_int_attribute("step", 7);
  w.commit();
  return path;
}

std::vector<float> autograd_logits(Shamn& model, const std::vector<int32_t>& tokens) {
  NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(tokens.size());
  const Tensor in =
      Tensor::from_data<int32_t>({1, n}, std::span<const int32_t>(tokens.data(), tokens.size()));
  const Tensor t = model.logits(in).value();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

}  // namespace

TEST_CASE("export stores the checkpoint's tensor identity as the file's source_id", "[infer][lora]") {
  const TestModel tm(model_toml(), "lora_id");
  const InferModel m = tm.runtime(ShqQuant::int8);
  std::map<std::string, Tensor> tensors;
  for (const NamedVar& p : tm.reference->named_parameters()) tensors.emplace(p.name, p.var.value());
  for (const NamedTensor& b : tm.reference->named_buffers()) tensors.emplace(b.name, b.tensor);
  CHECK(m.file().header().source_id() == named_tensors_crc32(tensors));
  CHECK(m.file().header().source_id() != 0);
  // Every export of one checkpoint names the same source.
  CHECK(tm.runtime(ShqQuant::f32).file().header().source_id() == m.file().header().source_id());
}

TEST_CASE("an adapter whose B is zero leaves the base's logits bit for bit", "[infer][lora]") {
  const TestModel tm(model_toml(), "lora_zero");
  const std::vector<int32_t> tokens = random_tokens(40, tm.config.vocab_size, 3);
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8}) {
    const InferModel m = tm.runtime(q);
    for (bool q8 : {false, true}) {
      INFO("base " << shq_quant_name(q) << ", adapter " << (q8 ? "q8" : "f32"));
      Spec s;
      s.zero_b = true;
      s.q8 = q8;
      const LoraAdapter a = load_adapter(m, s);
      CHECK(a.adapted_matrices() == adaptable(tm.config).size());
      CHECK(same_bits(logits_with(m, tokens, &a), logits_with(m, tokens, nullptr)));
      // And a non-zero one changes them.
      s.zero_b = false;
      const LoraAdapter b = load_adapter(m, s);
      CHECK(mean_rel_diff(logits_with(m, tokens, &b), logits_with(m, tokens, nullptr)) > 1e-3);
    }
  }
}

TEST_CASE("an adapter's bytes a decoded token count each matrix a token passes, the experts k of E",
          "[infer][lora]") {
  const TestModel tm(model_toml(), "lora_bytes");
  const InferModel m = tm.runtime(ShqQuant::int8);
  const ModelConfig& c = tm.config;
  const MoeOptions mo = c.moe();
  REQUIRE(mo.experts() > mo.k);  // so an expert's share is not the whole of it
  Spec s;
  s.rank = 3;
  s.matrices = {"layers.0.mixer.out", "layers.1.moe.experts.0.up", "layers.1.moe.experts.1.down"};
  const LoraAdapter f32 = load_adapter(m, s);
  // f32 factors: A [r, in] and B [r, out], 4 bytes a value; each expert's
  // matrix is on a token's path k times in E.
  const double share = static_cast<double>(mo.k) / static_cast<double>(mo.experts());
  const double want =
      4.0 * s.rank * (2 * c.dim + share * (mo.up.in + mo.up.out) + share * (mo.down.in + mo.down.out));
  CHECK(static_cast<double>(f32.bytes_per_token()) == Approx(want).epsilon(1e-9));
  // At a rank of whole quantisation blocks, int8 factors read about a quarter
  // of f32's bytes (scales beside them); at rank 3 their padding makes them larger.
  s.rank = 32;
  const LoraAdapter f32_wide = load_adapter(m, s);
  s.q8 = true;
  const LoraAdapter q8_wide = load_adapter(m, s);
  CHECK(q8_wide.bytes_per_token() > 0);
  CHECK(q8_wide.bytes_per_token() < f32_wide.bytes_per_token() / 2);
}

TEST_CASE("an adapter's few-rows copy of A is counted only where the base hands the term whole q8 rows",
          "[infer][lora]") {
  // A block-sparse matrix's inputs come whole-row quantised only at blocks of
  // whole q8 blocks (model_products.cpp's whole_blocks); an f32 base never.
  for (const int64_t block : {16, 32}) {
    const TestModel tm(model_toml("", block), "lora_copy_bytes_" + std::to_string(block));
    const InferModel q8 = tm.runtime(ShqQuant::int8), f32 = tm.runtime(ShqQuant::f32);
    Spec s;
    s.q8 = true;
    s.matrices = {"layers.0.mixer.out"};
    const bool copy_read = block % kQuantBlock == 0 && few_rows_q8_available();
    INFO("block " << block << ", few-rows kernel " << few_rows_q8_available());
    CHECK((load_adapter(q8, s).bytes_per_token() != load_adapter(f32, s).bytes_per_token()) == copy_read);
  }
}

TEST_CASE("a dense matrix's adapter equals its weights with (alpha / r) B A folded in", "[infer][lora]") {
  const TestModel tm(model_toml(), "lora_fold", 5, kBiasWidth);
  const InferModel m = tm.runtime(ShqQuant::f32);
  Spec s;
  s.rank = 3;
  s.alpha = 1.5;
  s.matrices = {"layers.1.memory.query", "layers.0.moe.router_expert"};
  const LoraAdapter a = load_adapter(m, s);
  // The folded model: W += (alpha / r) B A on the autograd model's weights.
  Shamn folded(tm.config);
  load_model_tensors(Hdf5Reader(tm.checkpoint), folded);
  const std::map<std::string, std::pair<int64_t, int64_t>> shapes = adaptable(tm.config);
  for (const NamedVar& p : folded.named_parameters())
    for (const std::string& matrix : s.matrices)
      if (p.name == matrix + ".weight") {
        const auto [out, in] = shapes.at(matrix);
        const auto [fa, fb] = factors(s, matrix, out, in);
        float* w = p.var.value().data<float>();
        for (int64_t o = 0; o < out; ++o)
          for (int64_t i = 0; i < in; ++i) {
            double ba = 0;
            for (int64_t k = 0; k < s.rank; ++k)
              ba += double(fb.data<float>()[o * s.rank + k]) * fa.data<float>()[k * in + i];
            w[o * in + i] += static_cast<float>(s.alpha / s.rank * ba);
          }
      }
  const std::string path = tm.dir + "/folded.h5";
  save_model_checkpoint(path, folded, tm.config.to_toml(), 42);
  ExportOptions o;
  o.quant = ShqQuant::f32;
  const std::vector<uint8_t> im = export_model_image(path, o);
  const InferModel mf(ShqFile::from_bytes(im.data(), im.size(), "folded"));
  // 600 rows: the term is added by spans of tiles within a task (infer/model_products.cpp).
  for (int64_t count : {30, 600}) {
    INFO(count << " tokens");
    const std::vector<int32_t> tokens = random_tokens(count, tm.config.vocab_size, 4);
    const std::vector<float> want = logits_with(mf, tokens, nullptr), got = logits_with(m, tokens, &a);
    CHECK(mean_rel_diff(got, logits_with(m, tokens, nullptr)) > 1e-3);  // the adapter matters
    CHECK(mean_rel_diff(got, want) < 1e-5);
  }
}

TEST_CASE("streams with different adapters decoded together get what each gets alone",
          "[infer][lora][threads]") {
  test::ThreadCountGuard threads;
  // Sparse blocks of whole quantisation blocks (the adapters read the base's
  // quantised rows), of half of one (they quantise their own), and narrower
  // than the low-rank kernel's 8 rows (B is added after the product, not per block).
  const int64_t block = GENERATE(32, 16, 4);
  INFO("block " << block);
  const TestModel tm(model_toml("", block), "lora_mixed_" + std::to_string(block), 5, kBiasWidth);
  const InferModel m = tm.runtime(ShqQuant::int8);
  Spec s1;
  s1.q8 = true;
  Spec s2;
  s2.seed = 2;
  s2.rank = 2;
  s2.matrices = {"layers.0.mixer.out", "layers.1.moe.experts.1.up", "layers.1.moe.experts.2.down"};
  const LoraAdapter a1 = load_adapter(m, s1), a2 = load_adapter(m, s2);
  const std::vector<const LoraAdapter*> which = {&a1, nullptr, &a2, &a1, nullptr, &a2, nullptr, &a1};
  const int64_t V = m.vocab_size();
  for (int threads_n : {1, 2}) {
    set_num_threads(threads_n);
    // Each stream alone: a prompt, then decoded tokens one at a time.
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<float>> alone;
    for (size_t i = 0; i < which.size(); ++i) {
      prompts.push_back(random_tokens(5 + static_cast<int64_t>(i), tm.config.vocab_size, 20 + i));
      alone.push_back(logits_with(m, prompts[i], which[i]));
    }
    // Together: one forward over every stream's prompt.
    std::vector<DecodeState> states(which.size(), m.new_state());
    std::vector<StreamStep> steps;
    int64_t rows = 0;
    for (size_t i = 0; i < which.size(); ++i) {
      StreamStep st{&states[i], prompts[i].data(), static_cast<int64_t>(prompts[i].size()), true};
      st.adapter = which[i];
      steps.push_back(st);
      rows += st.n;
    }
    std::vector<float> together(static_cast<size_t>(rows * V));
    m.forward(steps, together.data());
    int64_t r = 0;
    for (size_t i = 0; i < which.size(); ++i) {
      INFO("threads " << threads_n << ", stream " << i);
      CHECK(std::memcmp(together.data() + r * V, alone[i].data(), alone[i].size() * sizeof(float)) == 0);
      r += static_cast<int64_t>(prompts[i].size());
    }
    // Then decode steps of one token a stream, all streams in one forward: on 2
    // threads the 8 rows run as two groups of streams, each through whole
    // layers with its own streams' adapters (streams_grouped). Alone, each
    // stream decodes the same tokens after its prompt.
    constexpr int kSteps = 3;
    const auto token = [&](size_t i, int j) {
      return static_cast<int32_t>((prompts[i][static_cast<size_t>(j)] + 1) % V);
    };
    std::vector<std::vector<float>> decoded_alone(which.size());
    for (size_t i = 0; i < which.size(); ++i) {
      DecodeState s = m.new_state();
      StreamStep prompt{&s, prompts[i].data(), static_cast<int64_t>(prompts[i].size()), false};
      prompt.adapter = which[i];
      m.forward(std::span(&prompt, 1), nullptr);
      for (int j = 0; j < kSteps; ++j) {
        const int32_t t = token(i, j);
        StreamStep st{&s, &t, 1, false};
        st.adapter = which[i];
        std::vector<float> row(static_cast<size_t>(V));
        m.forward(std::span(&st, 1), row.data());
        decoded_alone[i].insert(decoded_alone[i].end(), row.begin(), row.end());
      }
    }
    for (int j = 0; j < kSteps; ++j) {
      std::vector<int32_t> next(which.size());
      std::vector<StreamStep> batch;
      for (size_t i = 0; i < which.size(); ++i) {
        next[i] = token(i, j);
        StreamStep st{&states[i], &next[i], 1, false};
        st.adapter = which[i];
        batch.push_back(st);
      }
      std::vector<float> out(which.size() * static_cast<size_t>(V));
      if (j == 0) start_profiling();
      m.forward(batch, out.data());
      if (j == 0) {
        stop_profiling();
        int64_t grouped = 0;
        for (const ProfileStat& st : profile_report().stats)
          grouped += st.name == "streams.grouped" ? st.calls : 0;
        CHECK(grouped == (threads_n > 1 ? 1 : 0));
      }
      for (size_t i = 0; i < which.size(); ++i) {
        INFO("threads " << threads_n << ", stream " << i << ", decode step " << j);
        CHECK(std::memcmp(out.data() + i * V, decoded_alone[i].data() + j * V, V * sizeof(float)) == 0);
      }
    }
  }
  // A long prompt with an adapter runs in slices on 2 threads: the same bits as on 1.
  const std::vector<int32_t> tokens = random_tokens(200, tm.config.vocab_size, 7);
  set_num_threads(1);
  const std::vector<float> one = logits_with(m, tokens, &a2);
  set_num_threads(2);
  CHECK(same_bits(logits_with(m, tokens, &a2), one));
}

TEST_CASE("adapters for another base, of the wrong shape or naming unknown matrices are refused",
          "[infer][lora]") {
  const TestModel tm(model_toml(), "lora_bad");
  const InferModel m = tm.runtime(ShqQuant::int8);
  const auto refused = [&](const std::vector<uint8_t>& im, const std::string& why) {
    INFO(why);
    CHECK_THROWS_WITH(LoraAdapter(ShqFile::from_bytes(im.data(), im.size(), "bad.shq"), m),
                      Catch::Contains(why));
  };
  const uint64_t id = m.file().header().source_id();
  refused(adapter_image(tm.config, id + 1, Spec{}), "trained on another base model");
  Spec one;
  one.matrices = {"layers.0.mixer.out"};
  // Wrong shape: an adapter of rank 4 whose header says rank 2.
  {
    ShqWriter w(ShqQuant::f32, lora_config_toml(2, 1.0), "", 0);
    w.set_source_id(id);
    const auto [a, b] = factors(one, "layers.0.mixer.out", tm.config.dim, tm.config.dim);
    w.add("layers.0.mixer.out.lora_a", ShqDType::f32, a.shape(), shq_tensor_data(a, ShqDType::f32));
    w.add("layers.0.mixer.out.lora_b", ShqDType::f32, b.shape(), shq_tensor_data(b, ShqDType::f32));
    refused(w.image(), "but rank 2 and the base's 'layers.0.mixer.out' imply [2, 64]");
  }
  // Unknown matrix, a lone factor, a bad rank.
  {
    ShqWriter w(ShqQuant::f32, lora_config_toml(4, 1.0), "", 0);
    w.set_source_id(id);
    const auto [a, b] = factors(one, "x", 64, 64);
    w.add("layers.9.mixer.out.lora_a", ShqDType::f32, a.shape(), shq_tensor_data(a, ShqDType::f32));
    refused(w.image(), "'layers.9.mixer.out.lora_a' is not the lora_a or lora_b of a matrix");
  }
  {
    ShqWriter w(ShqQuant::f32, lora_config_toml(4, 1.0), "", 0);
    w.set_source_id(id);
    const auto [a, b] = factors(one, "x", 64, 64);
    w.add("layers.0.mixer.out.lora_a", ShqDType::f32, a.shape(), shq_tensor_data(a, ShqDType::f32));
    refused(w.image(), "'layers.0.mixer.out' has only its lora_a");
  }
  {
    ShqWriter w(ShqQuant::f32, "[lora]\nrank = 0\nalpha = 1.0\n", "", 0);
    w.set_source_id(id);
    const auto [a, b] = factors(one, "x", 64, 64);
    w.add("layers.0.mixer.out.lora_a", ShqDType::f32, a.shape(), shq_tensor_data(a, ShqDType::f32));
    refused(w.image(), "lora.rank is 0");
  }
  // An alpha whose scale overflows float would make every logit NaN.
  for (const char* alpha : {"inf", "1e300"}) {
    ShqWriter w(ShqQuant::f32, std::string("[lora]\nrank = 4\nalpha = ") + alpha + "\n", "", 0);
    w.set_source_id(id);
    const auto [a, b] = factors(one, "layers.0.mixer.out", tm.config.dim, tm.config.dim);
    w.add("layers.0.mixer.out.lora_a", ShqDType::f32, a.shape(), shq_tensor_data(a, ShqDType::f32));
    w.add("layers.0.mixer.out.lora_b", ShqDType::f32, b.shape(), shq_tensor_data(b, ShqDType::f32));
    refused(w.image(), "must be > 0 and give a finite float scale");
  }
  // A model file is not an adapter, and an adapter is not a model.
  {
    ExportOptions o;
    const std::vector<uint8_t> im = export_model_image(tm.checkpoint, o);
    refused(im, "is not a LoRA adapter file");
    const std::vector<uint8_t> ad = adapter_image(tm.config, id, one);
    CHECK_THROWS_WITH(InferModel(ShqFile::from_bytes(ad.data(), ad.size(), "ad.shq")),
                      Catch::Contains("is a LoRA adapter, not a model"));
  }
  // A base that does not name its source (exported before version 3) takes no adapter.
  {
    ExportOptions o;
    std::vector<uint8_t> im = export_model_image(tm.checkpoint, o);
    ShqHeader h;
    std::memcpy(&h, im.data(), sizeof(h));
    h.set_source_id(0);
    h.header_crc = crc32_bytes(&h, offsetof(ShqHeader, header_crc));
    std::memcpy(im.data(), &h, sizeof(h));
    const InferModel m0(ShqFile::from_bytes(im.data(), im.size(), "old.shq"));
    const std::vector<uint8_t> ad = adapter_image(tm.config, id, one);
    CHECK_THROWS_WITH(LoraAdapter(ShqFile::from_bytes(ad.data(), ad.size(), "ad.shq"), m0),
                      Catch::Contains("does not say which checkpoint it was exported from"));
  }
  // An adapter loaded for one base cannot run on a model of another checkpoint.
  const TestModel other(model_toml(), "lora_other", 9);
  const InferModel mo = other.runtime(ShqQuant::int8);
  const LoraAdapter a = load_adapter(m, one);
  const std::vector<int32_t> tokens = random_tokens(4, tm.config.vocab_size, 1);
  CHECK_THROWS_WITH(logits_with(mo, tokens, &a), Catch::Contains("belongs to another base model"));
}

TEST_CASE("an adapter checkpoint exported for the runtime gives the autograd model's logits",
          "[infer][lora]") {
  // Block 4 is narrower than the low-rank kernel's chunk: B's term then follows the whole product.
  const int64_t block = GENERATE(32, 4);
  INFO("block " << block);
  const TestModel tm(model_toml("", block), "lora_e2e_" + std::to_string(block), 5, kBiasWidth);
  // The adapted model: the base's weights, adapters on every kind of matrix, B random.
  Shamn adapted(tm.config);
  const std::string path = write_adapter_checkpoint(
      tm,
      LoraOptions{4,
                  6.0,
                  {"layers.*.mixer.out", "layers.*.memory.query", "layers.*.moe.router_group",
                   "layers.*.moe.router_expert", "layers.*.moe.experts.*.up", "layers.1.moe.experts.*.down"}},
      adapted, "adapter.h5");
  const AdapterIdentity id = read_adapter_identity(Hdf5Reader(path));
  CHECK(id.base_crc32 == checkpoint_source_id(tm.checkpoint));  // the same identity on both sides
  // 300 tokens: the term is added by spans of row blocks within a task (infer/model_products.cpp).
  const int64_t count = GENERATE(33, 300);
  const std::vector<int32_t> tokens = random_tokens(count, tm.config.vocab_size, 12);
  const std::vector<float> ref = autograd_logits(adapted, tokens);
  // How far the bare int8 runtime is from the bare autograd model on these
  // tokens: its error grows along a sequence (the conv state carries it).
  Shamn base(tm.config);
  load_model_tensors(Hdf5Reader(tm.checkpoint), base);
  const std::vector<float> base_ref = autograd_logits(base, tokens);
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8}) {
    INFO("quant " << shq_quant_name(q) << ", " << count << " tokens");
    const InferModel m = tm.runtime(q);
    AdapterExport o;
    o.rank = id.lora.rank;
    o.alpha = id.lora.alpha;
    o.base_id = id.base_crc32;
    o.quant = q;
    const std::vector<uint8_t> im = export_adapter_image(path, o);
    const LoraAdapter a(ShqFile::from_bytes(im.data(), im.size(), "adapter.shq"), m);
    CHECK(a.adapted_matrices() == 2 * 3 + 1 + 2 * 4 + 4);
    const std::vector<float> got = logits_with(m, tokens, &a), bare = logits_with(m, tokens, nullptr);
    const double err = mean_rel_diff(got, ref), moved = mean_rel_diff(bare, ref);
    const double bare_err = mean_rel_diff(bare, base_ref);
    INFO("mean relative difference to autograd: " << err << " (bare base: " << moved
                                                  << "; bare runtime to bare autograd: " << bare_err << ")");
    // f32: float rounding only (the runtime's RMSNorm sums in 16 lanes); int8:
    // the bound the bare int8 runtime is held to (test_infer_model.cpp), or
    // near the bare runtime's own error where 300 tokens carry it further
    // (0.04 at block 32: the adapter adds none of its own).
    CHECK(err < (q == ShqQuant::f32 ? 1e-5 : std::max(0.03, 1.5 * bare_err)));
    CHECK(moved > 10 * err);  // the adapter is what the comparison sees
  }
}

TEST_CASE("export --merge folds a dense-side adapter into its base's matrices", "[infer][lora]") {
  // rsLoRA too: autograd, the merge and the adapter file beside the base all
  // scale by alpha / sqrt(3), not alpha / 3 (1.7x apart: far outside the bounds below).
  const bool rslora = GENERATE(false, true);
  INFO("rslora " << rslora);
  const TestModel tm(model_toml(), rslora ? "lora_merge_rs" : "lora_merge");
  Shamn adapted(tm.config);
  const LoraOptions lora{
      3, 4.5, {"layers.*.memory.query", "layers.*.moe.router_group", "layers.*.moe.router_expert"}, rslora};
  const std::string path = write_adapter_checkpoint(tm, lora, adapted, "dense_side.h5");
  CHECK(read_adapter_identity(Hdf5Reader(path)).lora.rslora == rslora);
  const std::vector<int32_t> tokens = random_tokens(29, tm.config.vocab_size, 13);
  const std::vector<float> ref = autograd_logits(adapted, tokens);
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8}) {
    INFO("quant " << shq_quant_name(q));
    ExportOptions o;
    o.quant = q;
    o.merge = MergeAdapter{path, lora.rank, lora.alpha, rslora};
    const std::vector<uint8_t> im = export_model_image(tm.checkpoint, o);
    const InferModel merged(ShqFile::from_bytes(im.data(), im.size(), "merged.shq"));
    const InferModel base = tm.runtime(q);
    const std::vector<float> got = logits_with(merged, tokens, nullptr),
                             bare = logits_with(base, tokens, nullptr);
    const double err = mean_rel_diff(got, ref), moved = mean_rel_diff(bare, ref);
    INFO("merged against autograd: " << err << " (bare base: " << moved << ")");
    CHECK(err < (q == ShqQuant::f32 ? 1e-5 : 0.03));
    CHECK(moved > 10 * err);
    // The same as the base with the adapter beside it.
    AdapterExport ao;
    ao.rank = lora.rank;
    ao.alpha = lora.alpha;
    ao.rslora = rslora;
    ao.base_id = base.file().header().source_id();
    ao.quant = q;
    const std::vector<uint8_t> aim = export_adapter_image(path, ao);
    const LoraAdapter a(ShqFile::from_bytes(aim.data(), aim.size(), "adapter.shq"), base);
    CHECK(a.rslora() == rslora);
    CHECK(mean_rel_diff(got, logits_with(base, tokens, &a)) < (q == ShqQuant::f32 ? 1e-5 : 0.03));
    // A new model: the base's adapters do not pair with it.
    CHECK(merged.file().header().source_id() != base.file().header().source_id());
    CHECK_THROWS_WITH(LoraAdapter(ShqFile::from_bytes(aim.data(), aim.size(), "adapter.shq"), merged),
                      Catch::Contains("trained on another base"));
  }
}

TEST_CASE("export --merge folds an adapter on the untied head, which the runtime cannot run beside it",
          "[infer][lora]") {
  const TestModel tm(model_toml("tie_head = false\n"), "lora_merge_head");
  Shamn adapted(tm.config);
  const LoraOptions lora{2, 3.0, {"head", "layers.0.moe.router_group"}};
  const std::string path = write_adapter_checkpoint(tm, lora, adapted, "head.h5");
  AdapterExport ao;
  ao.rank = lora.rank;
  ao.alpha = lora.alpha;
  ao.base_id = checkpoint_source_id(tm.checkpoint);
  CHECK_THROWS_WITH(export_adapter_image(path, ao), Catch::Contains("--merge"));
  const std::vector<int32_t> tokens = random_tokens(21, tm.config.vocab_size, 14);
  const std::vector<float> ref = autograd_logits(adapted, tokens);
  ExportOptions o;
  o.quant = ShqQuant::f32;
  o.merge = MergeAdapter{path, lora.rank, lora.alpha};
  const std::vector<uint8_t> im = export_model_image(tm.checkpoint, o);
  const InferModel merged(ShqFile::from_bytes(im.data(), im.size(), "merged.shq"));
  const double err = mean_rel_diff(logits_with(merged, tokens, nullptr), ref),
               moved = mean_rel_diff(logits_with(tm.runtime(ShqQuant::f32), tokens, nullptr), ref);
  INFO("merged against autograd: " << err << " (bare base: " << moved << ")");
  CHECK(err < 1e-5);
  CHECK(moved > 10 * err);
}

TEST_CASE("export --merge refuses block-sparse targets and files that are not adapters", "[infer][lora]") {
  const TestModel tm(model_toml(), "lora_merge_bad");
  Shamn adapted(tm.config);
  const std::string sparse = write_adapter_checkpoint(
      tm, LoraOptions{2, 2.0, {"layers.*.moe.router_group", "layers.1.moe.experts.0.up"}}, adapted,
      "sparse.h5");
  ExportOptions o;
  o.merge = MergeAdapter{sparse, 2, 2.0};
  CHECK_THROWS_WITH(export_model_image(tm.checkpoint, o),
                    Catch::Contains("adapts 'layers.1.moe.experts.0.up', a block-sparse matrix"));
  // The rank the checkpoint records must be its factors', and the scale finite.
  Shamn dense(tm.config);
  const std::string rank2 =
      write_adapter_checkpoint(tm, LoraOptions{2, 2.0, {"layers.*.moe.router_group"}}, dense, "rank2.h5");
  o.merge = MergeAdapter{rank2, 3, 2.0};
  CHECK_THROWS_WITH(export_model_image(tm.checkpoint, o), Catch::Contains("needs lora_a [3, in]"));
  o.merge = MergeAdapter{rank2, 0, 2.0};
  CHECK_THROWS_WITH(export_model_image(tm.checkpoint, o), Catch::Contains("want a rank of at least 1"));
  o.merge = MergeAdapter{tm.checkpoint, 2, 2.0};
  CHECK_THROWS_WITH(export_model_image(tm.checkpoint, o), Catch::Contains("is not a LoRA factor"));
}

}  // namespace shamn
