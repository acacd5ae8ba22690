#!/usr/bin/python3
"""Self-tests of decode_bench.py. Run: /usr/bin/python3 experiments/reference/test_decode_bench.py"""

import copy
import json
import os
import subprocess
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import decode_bench as db  # noqa: E402
import shamn_ref as ref  # noqa: E402

SCRIPT = os.path.join(HERE, "decode_bench.py")
TINY = os.path.join(HERE, "configs", "tiny.toml")

# Three layers of kernel 3 (receptive field 7), memory banks on the first and
# last layer, block-sparse layers with a < nib, cross-group MoE routing.
TOML = """
[model]
vocab_size = 40
dim = 16
n_layers = 3
[model.embed]
buckets = 12
tie_head = {tie}
[model.sparse]
block = 8
sparsity = 0.5
[model.mixer]
kernel = 3
[model.memory]
layers = [0, 2]
size = 36
topk = 3
key_dim = 8
[model.moe]
groups = 2
experts_per_group = 2
group_k = 2
k = 3
hidden = 16
"""


def make_model(tie, seed):
    cfg = ref.parse_model_config(TOML.format(tie=tie))
    # std 0.2 rather than 0.02 so that a token just outside the receptive
    # field would move the logits far above round-off (see test_window_is_tight).
    return ref.init_model(ref.SHAMN(cfg), seed=seed, std=0.2).eval()


def rel_err(a, b):
    return float((a - b).abs().max() / max(a.abs().max(), b.abs().max()))


class TestDecode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = {"tied": make_model("true", 5), "untied": make_model("false", 6)}
        cls.tokens = torch.randint(0, 40, (24,), generator=torch.Generator().manual_seed(0))

    def variants(self):
        for name, model in self.models.items():
            yield name, "f32", model, 1e-5
            yield name, "f64", copy.deepcopy(model).to(torch.float64), 1e-12

    @torch.no_grad()
    def test_window_equals_full_forward(self):
        R = db.receptive_field(self.models["tied"].cfg)
        self.assertEqual(R, 7)
        for name, dtype, model, tol in self.variants():
            full = db.all_logits(model, self.tokens)
            for t in range(len(self.tokens)):
                window = db.last_logits(model, self.tokens[max(0, t - R + 1):t + 1])
                self.assertLess(rel_err(window, full[t]), tol, f"{name} {dtype} position {t}")

    @torch.no_grad()
    def test_window_is_tight(self):
        """One token fewer than R changes the last logits: R is the receptive field, not a bound."""
        model = copy.deepcopy(self.models["tied"]).to(torch.float64)
        R = db.receptive_field(model.cfg)
        full = db.all_logits(model, self.tokens)
        for t in range(R - 1, len(self.tokens)):
            short = db.last_logits(model, self.tokens[t - R + 2:t + 1])
            self.assertGreater(rel_err(short, full[t]), 1e-6, f"position {t}")

    @torch.no_grad()
    def test_incremental_equals_full_forward(self):
        for name, dtype, model, tol in self.variants():
            full = db.all_logits(model, self.tokens)
            decoder = db.IncrementalDecoder(model)
            decoder.prefill([])
            for t, token in enumerate(self.tokens.tolist()):
                self.assertLess(rel_err(decoder.step(token), full[t]), tol, f"{name} {dtype} position {t}")

    def test_greedy_modes_agree_and_prefill(self):
        model, prompt = self.models["tied"], self.tokens[:10].tolist()
        window, _ = db.greedy_decode(db.WindowDecoder(model), prompt, 12)
        incremental, _ = db.greedy_decode(db.IncrementalDecoder(model), prompt, 12)
        self.assertEqual(window, incremental)
        with torch.no_grad():  # the first generated token reads the prompt's last position
            self.assertEqual(window[0], int(db.all_logits(model, torch.tensor(prompt))[-1].argmax()))

    def test_check_line_and_window_all_rows(self):
        model, prompt = self.models["untied"], self.tokens[:10].tolist()
        check = db.check_against_full(model, prompt, 8)
        self.assertEqual(check["positions"], 18)
        self.assertLess(max(check["window_max_rel_err"], check["incremental_max_rel_err"]), 1e-5)
        self.assertEqual(db.greedy_decode(db.DECODERS["window_all_rows"](model), prompt, 8)[0],
                         db.greedy_decode(db.WindowDecoder(model), prompt, 8)[0])

    def test_quantize_dynamic_converts_dense_linears_only(self):
        expected = {"tied": 2 * 3 + 2, "untied": 2 * 3 + 2 + 1}  # routers per layer, 2 queries, head
        for name, model in self.models.items():
            qmodel, converted = db.quantize(model)
            self.assertEqual(len(converted), expected[name], converted)
            self.assertFalse(any(".mixer.out" in c or ".experts." in c for c in converted))
            self.assertEqual(name == "untied", "head" in converted)
            with torch.no_grad():
                float_logits = db.all_logits(model, self.tokens)
                decoder = db.IncrementalDecoder(qmodel)
                decoder.prefill(self.tokens[:-1].tolist())
                q_logits = decoder.step(int(self.tokens[-1]))
            self.assertLess(rel_err(q_logits, float_logits[-1]), 0.1)

    def test_cli(self):
        cmd = [sys.executable, SCRIPT, "--config", TINY, "--new-tokens", "3", "--repeats", "1",
               "--warmup", "0", "--threads", "1", "--quantize-dynamic"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        lines = [json.loads(line) for line in out.splitlines()]
        self.assertEqual([(l["mode"], l["quant"]) for l in lines],
                         [("window", "none"), ("incremental", "none"),
                          ("window", "dynamic_qint8"), ("incremental", "dynamic_qint8")])
        self.assertEqual(lines[0]["first_tokens"], lines[1]["first_tokens"])
        self.assertEqual(lines[2]["converted_linear"], 2 * 2 + 1)
        self.assertEqual(lines[2]["block_sparse_not_converted"], 2 * (1 + 2 * 4))
        bad = subprocess.run([sys.executable, SCRIPT, "--checkpoint", "/nonexistent.h5"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("decode_bench: error:", bad.stderr)


if __name__ == "__main__":
    unittest.main()
