#!/usr/bin/python3
"""Self-tests of the SHAMN reference. Run: /usr/bin/python3 experiments/reference/test_reference.py"""

import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shamn_ref as ref  # noqa: E402

SCRIPT = os.path.join(HERE, "shamn_ref.py")
COMPARE = os.path.join(HERE, "compare.py")
TINY = os.path.join(HERE, "configs", "tiny.toml")
SMALL = os.path.join(HERE, "configs", "small.toml")
with open(TINY, encoding="utf-8") as _f:
    TINY_TEXT = _f.read()

# A very small model that still has every part: two memory banks, cross-group
# expert selection (group_k 2, k 3, so the group router reaches the gates),
# a kernel longer than 1 and block-sparse layers with a < nib.
CHECK_TOML = """
[model]
vocab_size = 40
dim = 16
n_layers = 2
[model.embed]
buckets = 12
[model.sparse]
block = 8
sparsity = 0.5
[model.mixer]
kernel = 3
[model.memory]
layers = [0, 1]
size = 36
topk = 3
key_dim = 8
[model.moe]
groups = 2
experts_per_group = 2
group_k = 2
k = 3
hidden = 16
aux_coef = 0.1
"""
# Untied head and dense (sparsity 0) block-sparse layers, group_k 1.
CHECK_TOML_UNTIED = """
[model]
vocab_size = 24
dim = 16
n_layers = 1
[model.embed]
sparsity = 0.5
hashes = 3
tie_head = false
[model.sparse]
block = 8
sparsity = 0.0
[model.memory]
size = 16
topk = 2
[model.moe]
groups = 3
experts_per_group = 2
k = 1
hidden = 8
"""


def run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True)


def random_batch(vocab, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, vocab, (B, T + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def model_away_from_ties(toml, B, T, min_margin=1e-3, std=0.2):
    """A float64 model and batch whose every top-k has a gap > min_margin after the k-th score,
    so that finite-difference steps cannot flip a selection."""
    cfg = ref.parse_model_config(toml)
    for seed in range(50):
        model = ref.init_model(ref.SHAMN(cfg), seed=seed, std=std).double()
        x, y = random_batch(cfg.vocab_size, B, T, seed)
        ref.TIE_MARGINS = []
        try:
            with torch.no_grad():
                model(x, y)
            margin = min(ref.TIE_MARGINS, default=math.inf)
        finally:
            ref.TIE_MARGINS = None
        if margin > min_margin:
            return model, x, y
    raise AssertionError("no seed gave top-k margins away from ties")


# ----------------------------------------------------------------------------


class TestHashing(unittest.TestCase):
    def test_mix64_check_values(self):
        self.assertEqual(ref.mix64(0x9E3779B97F4A7C15), 0xE220A8397B1DCDAF)
        bi = ref.initial_bucket_index(32000, 2, 1600)
        self.assertEqual(bi.dtype, np.int32)
        for token, want in [(0, (1135, 500)), (1, (65, 1319)), (1000, (776, 1455)), (31999, (788, 30))]:
            self.assertEqual(tuple(bi[token]), want)

    def test_vectorised_matches_scalar(self):
        bi = ref.initial_bucket_index(300, 3, 97)
        for t in [0, 1, 150, 299]:
            for j in range(3):
                z = (t + (j + 1) * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)
                self.assertEqual(bi[t, j], ref.mix64(z) % 97)


class TestLoraDropoutMasks(unittest.TestCase):
    def test_philox_known_answers(self):
        # Random123's known-answer vectors for Philox4x32-10 (counter, key).
        zero = [int(w[0]) for w in ref.philox4x32(np.array([0], dtype=np.uint64), 0, 0)]
        self.assertEqual(zero, [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8])
        ones = 0xFFFFFFFFFFFFFFFF
        full = [int(w[0]) for w in ref.philox4x32(np.array([ones], dtype=np.uint64), ones, ones)]
        self.assertEqual(full, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD])

    def test_mask_rate_and_offsets(self):
        p, n = 0.3, 100_003
        keep = ref.dropout_keep(p, 12345, ref.fnv1a64("layers.0.mixer.out.lora_dropout"), 0, n)
        sd = math.sqrt(n * p * (1 - p))
        self.assertLess(abs(int(keep.sum()) - n * (1 - p)), 5 * sd)
        # A slice of the mask drawn on its own is the same slice of the whole.
        np.testing.assert_array_equal(ref.dropout_keep(p, 12345, 7, 333, 1000),
                                      ref.dropout_keep(p, 12345, 7, 0, 1333)[333:])
        self.assertFalse(np.array_equal(ref.dropout_keep(p, 12345, 7, 0, 1000),
                                        ref.dropout_keep(p, 12345, 8, 0, 1000)))

    def test_fnv1a64(self):
        self.assertEqual(ref.fnv1a64(""), 0xCBF29CE484222325)
        self.assertEqual(ref.fnv1a64("a"), 0xAF63DC4C8601EC8C)


class TestConfig(unittest.TestCase):
    def test_defaults(self):
        c = ref.parse_model_config("[model]\n")
        self.assertEqual((c.vocab_size, c.dim, c.n_layers), (32000, 512, 8))
        self.assertEqual(c.embed_buckets, 1600)
        self.assertEqual(c.memory_layers, [4])
        self.assertEqual((c.memory_size, c.memory_topk, c.memory_key_dim), (65536, 32, 256))
        self.assertEqual((c.mixer_sparsity, c.moe_sparsity, c.moe_hidden), (0.9, 0.9, 512))
        self.assertEqual(ref.active_blocks(0.9, 16), 2)          # round(1.6)
        self.assertEqual(ref.active_blocks(0.99, 16), 1)         # max(1, round(0.16))

    def test_derived_values(self):
        c = ref.parse_model_config("[model]\nvocab_size = 10\ndim = 70\nn_layers = 5\n"
                                   "[model.embed]\nsparsity = 0.75\n[model.sparse]\nblock = 7\nsparsity = 0.5\n"
                                   "[model.moe]\nsparsity = 0.25\n")
        self.assertEqual(c.embed_buckets, 3)        # round(2.5) = 3, half away from zero
        self.assertEqual(c.memory_key_dim, 34)      # 70 / 2 = 35, rounded down to even
        self.assertEqual(c.memory_layers, [2])      # 5 // 2
        self.assertEqual((c.mixer_sparsity, c.moe_sparsity), (0.5, 0.25))
        self.assertEqual(ref.active_blocks(0.5, 5), 3)            # round(2.5) = 3
        c = ref.parse_model_config("[model.embed]\nbuckets = 100\nsparsity = 0.5\n")
        self.assertEqual(c.embed_buckets, 100)

    def test_resolved_toml_round_trips(self):
        for path in [TINY, SMALL]:
            c = ref.load_config(path)
            self.assertEqual(ref.parse_model_config(c.to_toml()), c)

    def test_other_tables_are_ignored(self):
        c = ref.parse_model_config("[model]\ndim = 64\n[train]\nlr = 3\n[data]\nx = 'y'\n")
        self.assertEqual(c.dim, 64)

    def test_errors_name_key_file_and_line(self):
        cases = [
            ("[model]\ndim = 64\n[model.memory]\nsize = 1000\n", "model.memory.size", ":4:"),
            ("[model]\ndim = 64\nwidth = 3\n", "model.width", ":3:"),
            ("[model]\ndim = 64\n[model.moe]\nk = 9\n", "model.moe.k", ":4:"),
            ("[model]\ndim = 60\n", "model.sparse.block", "multiple"),
            ("[model]\ndim = 64\n[model.sparse]\nsparsity = 1.0\n", "model.sparse.sparsity", ":4:"),
            ("[model]\ndim = 64\n[model.mixer]\nkernel = 'four'\n", "model.mixer.kernel", "expected a integer"),
            ("[model]\ndim = 64\n[model.memory]\ntopk = 17\nsize = 256\n", "model.memory.topk", ":4:"),
            ("[model]\ndim = 64\n[model.memory]\nlayers = [9]\n", "model.memory.layers", ":4:"),
            ("[model]\ndim = 64\n[model.memory]\nkey_dim = 7\n", "model.memory.key_dim", ":4:"),
            ("[model.foo]\nx = 1\n", "model.foo", "unknown"),
            ("[model]\ndim = 64\n[model.embed]\ntie_head = 1\n", "model.embed.tie_head", "boolean"),
        ]
        for text, key, fragment in cases:
            with self.assertRaises(ref.ConfigError, msg=text) as ctx:
                ref.parse_model_config(text, source="cfg.toml")
            message = str(ctx.exception)
            self.assertIn(key, message)
            self.assertIn("cfg.toml", message)
            self.assertIn(fragment, message)


class TestTies(unittest.TestCase):
    def test_topk_lower_prefers_lower_index(self):
        s = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
        self.assertEqual(ref.topk_lower(s, 2).tolist(), [[1, 2], [0, 1]])
        self.assertEqual(ref.topk_lower(s, 4).tolist(), [[1, 2, 3, 4], [0, 1, 2, 3]])
        self.assertEqual(ref.topk_lower(s, 6).tolist(), [[0, 1, 2, 3, 4, 5]] * 2)
        self.assertEqual(ref.topk_lower(torch.tensor([2.0, -math.inf, 2.0, -math.inf]), 3).tolist(), [0, 1, 2])
        # long rows take other code paths in topk
        long = torch.zeros(1, 5000)
        long[0, 4000] = 1.0
        self.assertEqual(ref.topk_lower(long, 3).tolist(), [[0, 1, 4000]])

    def test_memory_key_ties(self):
        s1 = torch.tensor([[1.0, 0.0, 1.0, 0.0]])   # keys 0 and 2 tie
        s2 = torch.tensor([[0.0, 1.0, 1.0, 1.0]])   # keys 1, 2, 3 tie: 1 and 2 win
        sigma, slots = ref.memory_select(s1, s2, 2)
        self.assertEqual(sigma.tolist(), [[2.0, 2.0]])
        self.assertEqual(slots.tolist(), [[0 * 4 + 1, 0 * 4 + 2]])

    def test_memory_candidate_ties_go_to_lower_slot_id(self):
        # topk(s1) = [3 (2.0), 1 (1.0)], topk(s2) = [2 (2.0), 0 (1.0)].
        # Candidates: (3,2)=4 slot 14; (3,0)=3 slot 12; (1,2)=3 slot 6; (1,0)=2 slot 4.
        # The tie at 3 must go to slot 6, although (3,0) comes first in pair order.
        s1 = torch.tensor([[0.0, 1.0, 0.0, 2.0]])
        s2 = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
        sigma, slots = ref.memory_select(s1, s2, 2)
        self.assertEqual(sorted(zip(slots[0].tolist(), sigma[0].tolist())), [(6, 3.0), (14, 4.0)])

    def test_memory_select_with_many_ties_matches_enumeration(self):
        g = torch.Generator().manual_seed(0)
        for n, k in [(8, 3), (16, 5), (6, 6)]:
            s1 = torch.randint(0, 3, (50, n), generator=g).double()   # integer scores: ties everywhere
            s2 = torch.randint(0, 3, (50, n), generator=g).double()
            sigma, slots = ref.memory_select(s1, s2, k)
            for row in range(50):
                I = sorted(range(n), key=lambda i: (-float(s1[row, i]), i))[:k]
                J = sorted(range(n), key=lambda j: (-float(s2[row, j]), j))[:k]
                cand = sorted(((float(s1[row, i] + s2[row, j]), i * n + j) for i in I for j in J),
                              key=lambda c: (-c[0], c[1]))[:k]
                self.assertEqual(sorted(slots[row].tolist()), sorted(c[1] for c in cand))
                got = dict(zip(slots[row].tolist(), sigma[row].tolist()))
                self.assertTrue(all(got[c[1]] == c[0] for c in cand))

    def test_moe_ties(self):
        # All groups and experts tie: group 0 is kept, its experts 0 and 1 chosen.
        experts, gates, P = ref.moe_route(torch.zeros(1, 2), torch.zeros(1, 4), 2, 2, 1, 2)
        self.assertEqual(experts.tolist(), [[0, 1]])
        self.assertTrue(torch.allclose(gates, torch.tensor([[0.5, 0.5]])))
        # Group 1 ahead: only its experts 2, 3 are eligible even though P ties elsewhere.
        experts, _, _ = ref.moe_route(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 4), 2, 2, 1, 2)
        self.assertEqual(experts.tolist(), [[2, 3]])
        # Both groups kept, P[1] == P[2] tie for the second pick: the lower id (1) wins.
        rg = torch.zeros(1, 2)
        re_ = torch.log(torch.tensor([[0.5, 0.25, 0.25, 0.5]]))
        experts, gates, P = ref.moe_route(rg, re_, 2, 2, 2, 3)
        self.assertEqual(experts.tolist(), [[0, 1, 3]])
        self.assertTrue(torch.allclose(gates, torch.tensor([[0.4, 0.2, 0.4]])))
        # Group tie with group_k 1 among three groups: lowest group kept.
        experts, _, _ = ref.moe_route(torch.tensor([[1.0, 2.0, 2.0]]), torch.zeros(1, 6), 3, 2, 1, 1)
        self.assertEqual(experts.tolist(), [[2]])


# ----------------------------------------------------------------------------
# Layers against obvious per-token loops


class TestLayersAgainstLoops(unittest.TestCase):
    def setUp(self):
        self.cfg = ref.parse_model_config(CHECK_TOML)
        self.model = ref.init_model(ref.SHAMN(self.cfg), seed=3, std=0.3).double()

    def test_block_sparse_linear_matches_dense(self):
        lin = ref.BlockSparseLinear(48, 32, 8, 0.5).double()
        self.assertEqual((lin.nob, lin.nib, lin.a), (4, 6, 3))
        with torch.no_grad():
            lin.values.normal_()
            lin.bias.normal_()
            lin.col_index.copy_(torch.tensor([[0, 2, 5], [1, 2, 3], [3, 4, 5], [0, 1, 4]], dtype=torch.int32))
        W = lin.dense_weight()
        for r in range(4):  # values[r, m, i, k] = W[r*b + i, col_index[r, m]*b + k]
            for m in range(3):
                c = int(lin.col_index[r, m])
                self.assertTrue(torch.equal(W[r * 8:(r + 1) * 8, c * 8:(c + 1) * 8], lin.values[r, m]))
        self.assertEqual(int((W != 0).sum()), 4 * 3 * 64)
        x = torch.randn(2, 5, 48, dtype=torch.float64, requires_grad=True)
        y = lin(x)
        self.assertTrue(torch.allclose(y, x @ W.t() + lin.bias))
        (y * torch.randn_like(y)).sum().backward()
        self.assertTrue(torch.allclose(lin.values.grad[lin.values.grad != 0].abs().sum(),
                                       lin.values.grad.abs().sum()))
        with self.assertRaisesRegex(ValueError, "multiples of block"):
            ref.BlockSparseLinear(20, 16, 8, 0.5)

    def test_dense_path_when_all_blocks_active(self):
        cfg = ref.parse_model_config(CHECK_TOML_UNTIED)
        model = ref.init_model(ref.SHAMN(cfg), seed=0).double()
        lin = model.layers[0].mixer.out
        self.assertEqual(lin.a, lin.nib)
        self.assertEqual(lin.col_index.tolist(), [[0, 1], [0, 1]])

    def test_embedding_and_tied_head(self):
        emb, V = self.model.embed, self.cfg.vocab_size
        tokens = torch.tensor([[0, 5, 39], [7, 7, 1]])
        e = emb(tokens)
        for b in range(2):
            for t in range(3):
                tok = int(tokens[b, t])
                want = sum(emb.importance[tok, j] * emb.table[int(emb.bucket_index[tok, j])] for j in range(2))
                self.assertTrue(torch.allclose(e[b, t], want))
        z = torch.randn(3, 16, dtype=torch.float64)
        logits = emb.head(z)
        for n in range(3):
            s = emb.table @ z[n]
            want = torch.stack([sum(emb.importance[t, j] * s[int(emb.bucket_index[t, j])] for j in range(2))
                                for t in range(V)])
            self.assertTrue(torch.allclose(logits[n], want))

    def test_chunked_head_cross_entropy_matches_plain(self):
        emb, V = self.model.embed, self.cfg.vocab_size
        z = torch.randn(37, 16, dtype=torch.float64)
        targets = torch.randint(0, V, (37,))
        plain = F.cross_entropy(emb.head(z), targets)
        g_plain = torch.autograd.grad(plain, [emb.table, emb.importance])
        for chunk in [1, 5, 37, 64]:
            chunked = emb.head_cross_entropy(z, targets, chunk=chunk)
            g_chunked = torch.autograd.grad(chunked, [emb.table, emb.importance])
            self.assertTrue(torch.allclose(plain, chunked))
            self.assertTrue(all(torch.allclose(a, b) for a, b in zip(g_plain, g_chunked)))

    def test_mixer_orientation(self):
        mixer = self.model.layers[0].mixer
        u = torch.randn(2, 6, 16, dtype=torch.float64)
        got = mixer(u)
        c = torch.zeros_like(u)
        for t in range(6):
            for i in range(mixer.kernel):  # conv[d, 0] weighs the current token
                if t - i >= 0:
                    c[:, t] += mixer.conv[:, i] * u[:, t - i]
        self.assertTrue(torch.allclose(got, mixer.out(F.silu(c))))

    def test_memory_matches_loop(self):
        mem = self.model.layers[1].memory
        n, k, dh = mem.n, mem.topk, mem.dh
        u = torch.randn(1, 7, 16, dtype=torch.float64)
        got = mem(u)[0]
        for t in range(7):
            q = mem.query.weight @ u[0, t] + mem.query.bias
            s1, s2 = mem.keys1 @ q[:dh], mem.keys2 @ q[dh:]
            I = sorted(range(n), key=lambda i: (-float(s1[i]), i))[:k]
            J = sorted(range(n), key=lambda j: (-float(s2[j]), j))[:k]
            cand = sorted(((float(s1[i] + s2[j]), i * n + j) for i in I for j in J), key=lambda c: (-c[0], c[1]))[:k]
            w = torch.softmax(torch.tensor([c[0] for c in cand], dtype=torch.float64), 0)
            want = sum(w[m] * mem.values[cand[m][1]] for m in range(k))
            self.assertTrue(torch.allclose(got[t], want))

    def test_moe_matches_loop(self):
        moe = self.model.layers[0].moe
        G, E, gk, k = moe.G, moe.E, moe.group_k, moe.k
        u = torch.randn(1, 9, 16, dtype=torch.float64)
        got, aux = moe(u)
        counts, Psum = torch.zeros(G * E, dtype=torch.float64), torch.zeros(G * E, dtype=torch.float64)
        for t in range(9):
            x = u[0, t]
            pg = torch.softmax(moe.router_group.weight @ x, 0)
            re_ = moe.router_expert.weight @ x
            P = torch.cat([pg[g] * torch.softmax(re_[g * E:(g + 1) * E], 0) for g in range(G)])
            groups = sorted(range(G), key=lambda g: (-float(pg[g]), g))[:gk]
            eligible = [e for e in range(G * E) if e // E in groups]
            chosen = sorted(eligible, key=lambda e: (-float(P[e]), e))[:k]
            total = sum(P[e] for e in chosen)
            want = sum(P[e] / total * moe.experts[e](x) for e in chosen)
            self.assertTrue(torch.allclose(got[0, t], want))
            for e in chosen:
                counts[e] += 1
            Psum += P
        want_aux = G * E * (counts / (9 * k) * Psum / 9).sum()
        self.assertTrue(torch.allclose(aux, want_aux))


# ----------------------------------------------------------------------------
# Gradients


class TestGradients(unittest.TestCase):
    def _gradcheck(self, toml, names):
        model, x, y = model_away_from_ties(toml, B=2, T=5)
        params = dict(model.named_parameters())
        chosen = {n: params[n].detach().clone().requires_grad_(True) for n in names}

        def loss_of(*tensors):
            override = dict(zip(names, tensors))
            return torch.nn.utils.stateless.functional_call(model, override, (x, y))[0]

        self.assertTrue(torch.autograd.gradcheck(loss_of, tuple(chosen[n] for n in names), eps=1e-6,
                                                 atol=1e-6, rtol=1e-4))

    def test_gradcheck_selected_parameters(self):
        self._gradcheck(CHECK_TOML, [
            "embed.table", "embed.importance", "final_norm.gain",
            "layers.0.mix_norm.gain", "layers.0.mixer.conv", "layers.0.mixer.out.values", "layers.0.mixer.out.bias",
            "layers.0.memory.query.weight", "layers.0.memory.keys1", "layers.0.memory.keys2",
            "layers.1.memory.values", "layers.1.mem_norm.gain",
            "layers.0.moe.router_group.weight", "layers.0.moe.router_expert.weight",
            "layers.1.moe.experts.1.up.values", "layers.1.moe.experts.2.down.values",
            "layers.1.moe.experts.3.up.bias", "layers.1.moe_norm.gain",
        ])

    def test_gradcheck_untied_dense(self):
        self._gradcheck(CHECK_TOML_UNTIED, [
            "head.weight", "embed.importance", "embed.table", "layers.0.mixer.out.values",
            "layers.0.memory.keys2", "layers.0.moe.router_expert.weight", "layers.0.moe.router_group.weight",
            "layers.0.moe.experts.4.down.values",
        ])

    def test_directional_derivative_all_parameters(self):
        for toml in [CHECK_TOML, CHECK_TOML_UNTIED, TINY_TEXT]:
            model, x, y = model_away_from_ties(toml, B=2, T=6, std=0.1)
            model.zero_grad()
            model(x, y)[0].backward()
            g = torch.Generator().manual_seed(7)
            named = list(model.named_parameters())
            direction = [torch.randn(p.shape, generator=g, dtype=torch.float64) for _, p in named]
            analytic = sum(float((p.grad * d).sum()) for (_, p), d in zip(named, direction) if p.grad is not None)
            base = [p.detach().clone() for _, p in named]
            eps, values = 1e-5, []
            with torch.no_grad():
                for sign in (1, -1):
                    for (_, p), b0, d in zip(named, base, direction):
                        p.copy_(b0 + sign * eps * d)
                    values.append(float(model(x, y)[0]))
                for (_, p), b0 in zip(named, base):
                    p.copy_(b0)
            numeric = (values[0] - values[1]) / (2 * eps)
            self.assertAlmostEqual(numeric, analytic, delta=1e-6 + 1e-5 * abs(analytic))

    def test_aux_gradient_through_pbar_only(self):
        # With group_k 1 the gates do not depend on the group router (pg cancels in
        # P / sum P), so its gradient is exactly aux_coef * d(mean aux)/d(weight).
        cfg = ref.parse_model_config(TINY_TEXT)
        model = ref.init_model(ref.SHAMN(cfg), seed=2, std=0.2).double()
        x, y = random_batch(cfg.vocab_size, 2, 8, 0)
        loss, ce, aux = model(x, y)
        g_aux = torch.autograd.grad(aux, model.layers[0].moe.router_group.weight, retain_graph=True)[0]
        g_ce = torch.autograd.grad(ce, model.layers[0].moe.router_group.weight, allow_unused=True)[0]
        self.assertTrue(g_ce is None or float(g_ce.abs().max()) < 1e-12)
        self.assertGreater(float(g_aux.abs().max()), 0.0)


# ----------------------------------------------------------------------------
# Checkpoints, token files, CLI


class TestFiles(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_round_trip(self):
        cfg = ref.load_config(SMALL)
        model = ref.init_model(ref.SHAMN(cfg), seed=5)
        ref.save_checkpoint(self.path("a.h5"), model, step=17)
        with h5py.File(self.path("a.h5")) as f:
            self.assertEqual(int(f.attrs["format_version"]), 1)
            self.assertEqual(int(f.attrs["step"]), 17)
            self.assertEqual(f["model/embed/bucket_index"].dtype, np.int32)
            self.assertEqual(f["model/layers/0/mixer/out/col_index"].dtype, np.int32)
            self.assertEqual(f["model/layers/2/memory/values"].dtype, np.float32)
            self.assertEqual(f["model/layers/0/moe/experts/15/down/values"].shape, (4, 1, 32, 32))
            self.assertNotIn("head", f["model"])
            self.assertNotIn("mem_norm", f["model/layers/1"])
        loaded, step = ref.load_checkpoint(self.path("a.h5"))
        self.assertEqual(step, 17)
        self.assertEqual(loaded.cfg, cfg)
        a, b = model.state_dict(), loaded.state_dict()
        self.assertEqual(list(a), list(b))
        for name in a:
            self.assertTrue(torch.equal(a[name], b[name]), name)
        # col_index rows: distinct, ascending, in range
        ci = model.layers[0].mixer.out.col_index
        self.assertTrue(bool((ci[:, 1:] > ci[:, :-1]).all()) if ci.shape[1] > 1 else True)

    def test_init_is_seeded(self):
        cfg = ref.load_config(TINY)
        a = ref.init_model(ref.SHAMN(cfg), seed=1).state_dict()
        b = ref.init_model(ref.SHAMN(cfg), seed=1).state_dict()
        c = ref.init_model(ref.SHAMN(cfg), seed=2).state_dict()
        self.assertTrue(all(torch.equal(a[n], b[n]) for n in a))
        self.assertFalse(torch.equal(a["layers.0.mixer.out.col_index"], c["layers.0.mixer.out.col_index"]))

    def test_loader_rejects_bad_files_by_name(self):
        model = ref.init_model(ref.SHAMN(ref.load_config(TINY)), seed=0)
        ref.save_checkpoint(self.path("a.h5"), model)

        def broken(edit):
            path = self.path("b.h5")
            ref.save_checkpoint(path, model)
            with h5py.File(path, "a") as f:
                edit(f)
            with self.assertRaises(ref.CheckpointError) as ctx:
                ref.load_checkpoint(path)
            return str(ctx.exception)

        msg = broken(lambda f: f.__delitem__("model/layers/1/memory/keys1"))
        self.assertIn("missing /model/layers/1/memory/keys1", msg)
        msg = broken(lambda f: f.create_dataset("model/layers/0/memory/keys1", data=np.zeros((16, 16), np.float32)))
        self.assertIn("unexpected /model/layers/0/memory/keys1", msg)

        def reshape(f):
            del f["model/final_norm/gain"]
            f.create_dataset("model/final_norm/gain", data=np.ones(63, np.float32))
        self.assertIn("/model/final_norm/gain has shape [63]", broken(reshape))

        def retype(f):
            data = f["model/embed/bucket_index"][()]
            del f["model/embed/bucket_index"]
            f.create_dataset("model/embed/bucket_index", data=data.astype(np.int64))
        self.assertIn("/model/embed/bucket_index has dtype int64", broken(retype))

        def bad_col(f):
            f["model/layers/0/mixer/out/col_index"][0, 0] = 7
        self.assertIn("layers.0.mixer.out.col_index", broken(bad_col))

    def test_loader_uses_saved_index_buffers(self):
        model = ref.init_model(ref.SHAMN(ref.load_config(TINY)), seed=0)
        path = self.path("a.h5")
        ref.save_checkpoint(path, model)
        with h5py.File(path, "a") as f:
            bi = f["model/embed/bucket_index"][()]
            f["model/embed/bucket_index"][...] = (bi + 1) % 64
            ci = f["model/layers/1/mixer/out/col_index"][()]
            f["model/layers/1/mixer/out/col_index"][...] = np.sort(3 - ci, axis=1)
        loaded, _ = ref.load_checkpoint(path)
        self.assertTrue(np.array_equal(loaded.embed.bucket_index.numpy(), (bi + 1) % 64))
        self.assertTrue(np.array_equal(loaded.layers[1].mixer.out.col_index.numpy(), np.sort(3 - ci, axis=1)))

    def test_tokens_and_batch(self):
        ref.write_tokens(self.path("t.bin"), np.arange(100) % 50)
        with open(self.path("t.bin"), "rb") as f:
            header = np.frombuffer(f.read(1024), np.int32)
        self.assertEqual(header[:3].tolist(), [20240520, 1, 100])
        self.assertEqual(os.path.getsize(self.path("t.bin")), 1024 + 200)
        tokens = ref.read_tokens(self.path("t.bin"))
        x, y = ref.make_batch(tokens, 3, 4)
        self.assertEqual(x.tolist(), [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
        self.assertEqual(y.tolist(), [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
        with self.assertRaisesRegex(ValueError, "needs 101 tokens"):
            ref.make_batch(tokens, 10, 10)
        with self.assertRaisesRegex(ValueError, "outside the vocabulary"):
            ref.make_batch(tokens, 3, 20, vocab_size=40)

    def test_loss_at_small_init_is_ln_vocab(self):
        cfg = ref.load_config(TINY)
        model = ref.init_model(ref.SHAMN(cfg), seed=0, std=0.002)
        x, y = random_batch(cfg.vocab_size, 4, 32, 1)
        with torch.no_grad():
            loss, ce, aux = model(x, y)
        self.assertLess(abs(float(ce) - math.log(cfg.vocab_size)), 0.02)
        self.assertLess(abs(float(aux) - 1.0), 0.05)  # near-uniform routing balances
        self.assertAlmostEqual(float(loss), float(ce) + cfg.moe_aux_coef * float(aux), places=5)

    def test_cli_and_compare(self):
        ckpt, tok, grads, grads64 = (self.path(n) for n in ["m.h5", "t.bin", "g.h5", "g64.h5"])
        self.assertEqual(run(SCRIPT, "init", TINY, "-o", ckpt, "--seed", "4").returncode, 0)
        self.assertEqual(run(SCRIPT, "make-tokens", "--vocab", "512", "--count", "300", "--seed", "1",
                             "-o", tok).returncode, 0)
        out = run(SCRIPT, "loss", ckpt, "--data", tok, "--batch", "4", "--seq", "16", "--grads", grads)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1)
        result = json.loads(lines[0])
        self.assertEqual(set(result), {"loss", "ce", "aux"})
        self.assertAlmostEqual(result["loss"], result["ce"] + 0.01 * result["aux"], places=5)
        out64 = run(SCRIPT, "loss", ckpt, "--data", tok, "--batch", "4", "--seq", "16", "--grads", grads64,
                    "--double")
        self.assertAlmostEqual(json.loads(out64.stdout)["loss"], result["loss"], places=5)

        model, _ = ref.load_checkpoint(ckpt)
        with h5py.File(grads) as f:
            self.assertEqual(ref._attr_text(f.attrs["kind"]), "gradients")
            stored = ref.read_group(f)
        self.assertEqual(set(stored), {n for n, _ in model.named_parameters()})
        self.assertTrue(all(stored[n].shape == tuple(p.shape) and stored[n].dtype == np.float32
                            for n, p in model.named_parameters()))

        self.assertEqual(run(COMPARE, grads, grads).returncode, 0)
        self.assertEqual(run(COMPARE, grads, grads64).returncode, 0)          # f32 vs f64 round-off
        self.assertEqual(run(COMPARE, ckpt, ckpt).returncode, 0)              # int buffers too

        def edited(src, dst, edit):
            with h5py.File(src) as f_in, h5py.File(dst, "w") as f_out:
                f_in.copy("model", f_out)
                edit(f_out)
            return dst

        def scale_one(f):
            f["model/layers/1/memory/values"][...] = f["model/layers/1/memory/values"][()] * 1.01
        bad = run(COMPARE, grads, edited(grads, self.path("p.h5"), scale_one))
        self.assertEqual(bad.returncode, 1)
        self.assertIn("layers.1.memory.values", [l.split()[0] for l in bad.stdout.splitlines() if "FAIL" in l])

        def tiny_noise(f):
            d = f["model/embed/table"][()]
            f["model/embed/table"][...] = d + 1e-6 * np.abs(d).max() * np.random.default_rng(0).standard_normal(d.shape)
        self.assertEqual(run(COMPARE, grads, edited(grads, self.path("n.h5"), tiny_noise)).returncode, 0)

        def one_entry(f):  # a single wrong entry in a mostly-zero gradient
            d = f["model/layers/1/memory/values"][()]
            i = np.unravel_index(np.argmax(np.abs(d)), d.shape)
            d[i] *= 0.99
            f["model/layers/1/memory/values"][...] = d
        self.assertEqual(run(COMPARE, grads, edited(grads, self.path("o.h5"), one_entry)).returncode, 1)

        self.assertEqual(run(COMPARE, grads, edited(grads, self.path("d.h5"),
                                                    lambda f: f.__delitem__("model/final_norm/gain"))).returncode, 1)

        def bump_index(f):
            f["model/embed/bucket_index"][0, 0] = (f["model/embed/bucket_index"][0, 0] + 1) % 64
        self.assertEqual(run(COMPARE, ckpt, edited(ckpt, self.path("i.h5"), bump_index)).returncode, 1)

    def test_bench_smoke(self):
        out = run(SCRIPT, "bench", "--config", TINY, "--batch", "2", "--seq", "16", "--threads", "1",
                  "--steps", "2")
        self.assertEqual(out.returncode, 0, out.stderr)
        row = json.loads(out.stdout.strip().splitlines()[0])
        self.assertEqual(row["threads"], 1)
        self.assertGreater(row["tokens_per_s"], 0)

    def test_train_schedule_and_runs(self):
        # SPEC 3's schedule: warm-up from lr / warmup, cosine from lr down to min_lr.
        self.assertAlmostEqual(ref.lr_at(0, 1.0, 0.1, 4, 12), 0.25)
        self.assertAlmostEqual(ref.lr_at(3, 1.0, 0.1, 4, 12), 1.0)
        self.assertAlmostEqual(ref.lr_at(4, 1.0, 0.1, 4, 12), 1.0)
        self.assertAlmostEqual(ref.lr_at(8, 1.0, 0.1, 4, 12), 0.55)
        self.assertAlmostEqual(ref.lr_at(12, 1.0, 0.1, 4, 12), 0.1)
        self.assertAlmostEqual(ref.lr_at(0, 1.0, 0.1, 0, 12), 1.0)

        tokens = self.path("tok.bin")
        ref.write_tokens(tokens, np.arange(3000) % 64)  # a sequence the model can learn
        args = ["train", TINY, "--train", tokens, "--val", tokens, "--batch", "4", "--seq", "16",
                "--warmup", "2", "--lr", "0.01", "--min-lr", "0.001", "--eval-every", "10",
                "--eval-batches", "2", "--seed", "3"]
        out = run(SCRIPT, *args, "--steps", "20")
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [json.loads(line) for line in out.stdout.strip().splitlines()]
        self.assertEqual([r["step"] for r in rows], [10, 20])
        self.assertLess(rows[1]["val_loss"], rows[0]["val_loss"])
        self.assertLess(rows[0]["val_loss"], math.log(64))
        self.assertAlmostEqual(rows[1]["val_ppl"], math.exp(rows[1]["val_loss"]), places=6)
        again = run(SCRIPT, *args, "--steps", "20")
        self.assertEqual(again.stdout.splitlines()[1].split('"tokens_per_s"')[0],
                         out.stdout.splitlines()[1].split('"tokens_per_s"')[0])  # seeded

        # The validation loss is the mean of consecutive batches' mean cross-entropy.
        model = ref.init_model(ref.SHAMN(ref.load_config(TINY)), seed=3)
        vocab = model.cfg.vocab_size
        val = (np.arange(200) * 7) % vocab
        expected = []
        for i in range(2):
            inputs, targets = ref.make_batch(val[i * 32:], 2, 16, vocab)
            expected.append(model(inputs, targets)[1].item())
        got = ref.validation_ce(model, val, 2, 16, 2, contextlib.nullcontext)
        self.assertAlmostEqual(got, sum(expected) / 2, places=6)

        bf16 = run(SCRIPT, *args, "--steps", "2", "--autocast", "bf16")
        self.assertEqual(bf16.returncode, 0, bf16.stderr)
        self.assertEqual(json.loads(bf16.stdout.strip())["autocast"], "bf16")

        bad = run(SCRIPT, *args, "--steps", "1")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("--warmup must lie in [0, --steps = 1], got 2", bad.stderr)

    def test_cli_errors(self):
        bad = self.path("bad.toml")
        with open(bad, "w") as f:
            f.write("[model]\ndim = 64\n[model.memory]\nsize = 1000\n")
        out = run(SCRIPT, "init", bad, "-o", self.path("x.h5"))
        self.assertEqual(out.returncode, 1)
        self.assertIn("bad.toml:4: model.memory.size", out.stderr)


if __name__ == "__main__":
    unittest.main()
