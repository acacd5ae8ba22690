#!/usr/bin/python3
"""Independent PyTorch reference of a SHAMN model (SPEC v1, /work/shared/SPEC.md).

A measuring tool, in the spirit of llm.c's train_gpt2.py: the C++ framework is
cross-checked against it (loss and every gradient from the same checkpoint and
batch) and its training step is the speed baseline. It is written from the
SPEC text alone and never imports anything from the C++ side.

Run it with Debian's interpreter, which has torch, h5py and numpy:

    /usr/bin/python3 experiments/reference/shamn_ref.py init CONFIG.toml -o CKPT.h5
    /usr/bin/python3 experiments/reference/shamn_ref.py make-tokens --vocab V --count N -o TOK.bin
    /usr/bin/python3 experiments/reference/shamn_ref.py loss CKPT.h5 --data TOK.bin --batch B --seq T [--grads G.h5]
    /usr/bin/python3 experiments/reference/shamn_ref.py bench --config CONFIG.toml --threads 1,2
    /usr/bin/python3 experiments/reference/shamn_ref.py train CONFIG.toml --train T.bin --val V.bin --steps N

Layout of this file: config (SPEC 5), hashing (SPEC 1.2), tie-aware top-k,
the layers (SPEC 1.1-1.7), the model, init, checkpoint and token-file I/O
(SPEC 4), the CLI.
"""

import argparse
import contextlib
import json
import math
import os
import re
import statistics
import sys
import time
import zlib
import tomllib
from dataclasses import dataclass, field

if __name__ == "__main__" and sys.argv[1:2] in (["bench"], ["train"]):
    # On the shared 2-core dev machine, OpenMP threads that spin at barriers
    # while a compiler holds the other core made 2-thread steps 5-10x slower
    # than 1-thread ones; sleeping waits avoid that. Must be set before torch loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

RMS_EPS = 1e-5
FORMAT_VERSION = 1


def round_half_away(x):
    """SPEC's round(): halves go away from zero (C++ std::round), unlike Python's round()."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


# ----------------------------------------------------------------------------
# Config (SPEC 5)


class ConfigError(ValueError):
    pass


# (table, key) -> (type, default). Table None is [model] itself. A default of
# None means "derived from other keys" (see ModelConfig.resolve).
_FLOAT, _INT, _BOOL, _INT_LIST = "float", "integer", "boolean", "list of integers"
MODEL_KEYS = {
    None: {"vocab_size": (_INT, 32000), "dim": (_INT, 512), "n_layers": (_INT, 8)},
    "embed": {"buckets": (_INT, None), "sparsity": (_FLOAT, 0.95), "hashes": (_INT, 2),
              "tie_head": (_BOOL, True)},
    "sparse": {"block": (_INT, 32), "sparsity": (_FLOAT, 0.9)},
    "mixer": {"kernel": (_INT, 4), "sparsity": (_FLOAT, None)},
    "memory": {"layers": (_INT_LIST, None), "size": (_INT, 65536), "topk": (_INT, 32),
               "key_dim": (_INT, None)},
    "moe": {"groups": (_INT, 4), "experts_per_group": (_INT, 4), "group_k": (_INT, 1), "k": (_INT, 2),
            "hidden": (_INT, None), "sparsity": (_FLOAT, None), "aux_coef": (_FLOAT, 0.01)},
}


@dataclass
class ModelConfig:
    """The resolved [model] config: every default filled in, every range checked."""
    vocab_size: int = 32000
    dim: int = 512
    n_layers: int = 8
    embed_buckets: int = 1600
    embed_sparsity: float = 0.95
    embed_hashes: int = 2
    embed_tie_head: bool = True
    sparse_block: int = 32
    sparse_sparsity: float = 0.9
    mixer_kernel: int = 4
    mixer_sparsity: float = 0.9
    memory_layers: list = field(default_factory=lambda: [4])
    memory_size: int = 65536
    memory_topk: int = 32
    memory_key_dim: int = 256
    moe_groups: int = 4
    moe_experts_per_group: int = 4
    moe_group_k: int = 1
    moe_k: int = 2
    moe_hidden: int = 512
    moe_sparsity: float = 0.9
    moe_aux_coef: float = 0.01

    @property
    def memory_n(self):
        return math.isqrt(self.memory_size)

    @property
    def n_experts(self):
        return self.moe_groups * self.moe_experts_per_group

    def to_toml(self):
        """The resolved config as TOML text (stored as the checkpoint's `config` attribute)."""
        def fmt(v):
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, float):
                return repr(v)
            if isinstance(v, list):
                return "[" + ", ".join(str(int(x)) for x in v) + "]"
            return str(v)
        lines = []
        for table, keys in MODEL_KEYS.items():
            lines.append("[model]" if table is None else f"\n[model.{table}]")
            for key in keys:
                attr = key if table is None else f"{table}_{key}"
                lines.append(f"{key} = {fmt(getattr(self, attr))}")
        return "\n".join(lines) + "\n"


def _find_line(text, table, key):
    """Best-effort line number of `key` inside [model.table] (tomllib gives no positions)."""
    want = "model" if table is None else f"model.{table}"
    current = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        header = re.fullmatch(r"\[\s*([A-Za-z0-9_.\s]+?)\s*\]", line)
        if header:
            current = re.sub(r"\s+", "", header.group(1))
            if key is None and current == want:
                return number
            continue
        if key is None:
            continue
        if current == want and re.match(rf"{re.escape(key)}\s*=", line):
            return number
        if current == "model" and table is not None and re.match(rf"{table}\s*\.\s*{re.escape(key)}\s*=", line):
            return number
    return None


def parse_model_config(text, source="<config>"):
    """Parse a TOML text's [model] tables (other top-level tables are ignored)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: not valid TOML: {err}") from None

    def fail(table, key, message):
        line = _find_line(text, table, key)
        where = f"{source}:{line}" if line else source
        name = "model" + (f".{table}" if table else "") + (f".{key}" if key else "")
        raise ConfigError(f"{where}: {name}: {message}")

    model = doc.get("model", {})
    if not isinstance(model, dict):
        fail(None, None, "must be a table")
    values = {}
    for table, keys in MODEL_KEYS.items():
        section = model if table is None else model.get(table, {})
        if not isinstance(section, dict):
            fail(None, table, "must be a table")
        for key, value in section.items():
            if table is None and key in MODEL_KEYS and key is not None:
                continue  # a sub-table of [model], handled on its own turn
            if key not in keys:
                if table is None:
                    fail(None, key, f"unknown key (known: {', '.join(sorted(keys) + sorted(k for k in MODEL_KEYS if k))})")
                fail(table, key, f"unknown key (known: {', '.join(sorted(keys))})")
            kind = keys[key][0]
            ok = {
                _INT: isinstance(value, int) and not isinstance(value, bool),
                _FLOAT: isinstance(value, (int, float)) and not isinstance(value, bool),
                _BOOL: isinstance(value, bool),
                _INT_LIST: isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value),
            }[kind]
            if not ok:
                fail(table, key, f"expected a {kind}, got {value!r}")
            values[(table, key)] = float(value) if kind == _FLOAT else value

    def get(table, key):
        return values.get((table, key), MODEL_KEYS[table][key][1])

    def check(cond, table, key, message, value=None):
        if not cond:
            shown = get(table, key) if value is None else value
            fail(table, key, f"{shown!r}: {message}")

    c = ModelConfig()
    c.vocab_size, c.dim, c.n_layers = get(None, "vocab_size"), get(None, "dim"), get(None, "n_layers")
    check(c.vocab_size >= 1, None, "vocab_size", "must be >= 1")
    check(c.vocab_size <= 65536, None, "vocab_size", "must be <= 65536 (tokens are stored as uint16)")
    check(c.dim >= 1, None, "dim", "must be >= 1")
    check(c.n_layers >= 1, None, "n_layers", "must be >= 1")

    c.sparse_block, c.sparse_sparsity = get("sparse", "block"), get("sparse", "sparsity")
    check(c.sparse_block >= 1, "sparse", "block", "must be >= 1")
    check(0.0 <= c.sparse_sparsity < 1.0, "sparse", "sparsity", "must be in [0, 1)")
    check(c.dim % c.sparse_block == 0, "sparse", "block", f"model.dim = {c.dim} is not a multiple of it")

    c.embed_sparsity, c.embed_hashes, c.embed_tie_head = (get("embed", "sparsity"), get("embed", "hashes"),
                                                          get("embed", "tie_head"))
    check(0.0 <= c.embed_sparsity < 1.0, "embed", "sparsity", "must be in [0, 1)")
    check(c.embed_hashes >= 1, "embed", "hashes", "must be >= 1")
    buckets = get("embed", "buckets")
    if buckets is None:
        buckets = round_half_away(c.vocab_size * (1.0 - c.embed_sparsity))
        check(buckets >= 1, "embed", "sparsity", f"leaves round({c.vocab_size} * (1 - sparsity)) = 0 buckets")
    else:
        check(buckets >= 1, "embed", "buckets", "must be >= 1")
    c.embed_buckets = buckets

    c.mixer_kernel = get("mixer", "kernel")
    check(c.mixer_kernel >= 1, "mixer", "kernel", "must be >= 1")
    c.mixer_sparsity = get("mixer", "sparsity")
    if c.mixer_sparsity is None:
        c.mixer_sparsity = c.sparse_sparsity
    check(0.0 <= c.mixer_sparsity < 1.0, "mixer", "sparsity", "must be in [0, 1)", c.mixer_sparsity)

    layers = get("memory", "layers")
    c.memory_layers = [c.n_layers // 2] if layers is None else list(layers)
    check(all(0 <= l < c.n_layers for l in c.memory_layers), "memory", "layers",
          f"every layer must be in [0, {c.n_layers})", c.memory_layers)
    check(len(set(c.memory_layers)) == len(c.memory_layers), "memory", "layers", "lists a layer twice")
    c.memory_size, c.memory_topk = get("memory", "size"), get("memory", "topk")
    check(c.memory_size >= 1 and math.isqrt(c.memory_size) ** 2 == c.memory_size, "memory", "size",
          "must be a perfect square n*n")
    check(1 <= c.memory_topk <= c.memory_n, "memory", "topk", f"must be in [1, n = {c.memory_n}]")
    key_dim = get("memory", "key_dim")
    c.memory_key_dim = (c.dim // 2) // 2 * 2 if key_dim is None else key_dim
    check(c.memory_key_dim >= 2 and c.memory_key_dim % 2 == 0, "memory", "key_dim", "must be even and >= 2", c.memory_key_dim)

    c.moe_groups, c.moe_experts_per_group = get("moe", "groups"), get("moe", "experts_per_group")
    c.moe_group_k, c.moe_k = get("moe", "group_k"), get("moe", "k")
    check(c.moe_groups >= 1, "moe", "groups", "must be >= 1")
    check(c.moe_experts_per_group >= 1, "moe", "experts_per_group", "must be >= 1")
    check(1 <= c.moe_group_k <= c.moe_groups, "moe", "group_k", f"must be in [1, groups = {c.moe_groups}]")
    check(1 <= c.moe_k <= c.moe_group_k * c.moe_experts_per_group, "moe", "k",
          f"must be in [1, group_k * experts_per_group = {c.moe_group_k * c.moe_experts_per_group}]")
    hidden = get("moe", "hidden")
    c.moe_hidden = c.dim if hidden is None else hidden
    check(c.moe_hidden >= 1 and c.moe_hidden % c.sparse_block == 0, "moe", "hidden",
          f"must be a positive multiple of model.sparse.block = {c.sparse_block}", c.moe_hidden)
    c.moe_sparsity = get("moe", "sparsity")
    if c.moe_sparsity is None:
        c.moe_sparsity = c.sparse_sparsity
    check(0.0 <= c.moe_sparsity < 1.0, "moe", "sparsity", "must be in [0, 1)", c.moe_sparsity)
    c.moe_aux_coef = get("moe", "aux_coef")
    check(c.moe_aux_coef >= 0.0 and math.isfinite(c.moe_aux_coef), "moe", "aux_coef", "must be finite and >= 0")
    return c


def load_config(path):
    with open(path, "r", encoding="utf-8") as f:
        return parse_model_config(f.read(), source=path)


def active_blocks(sparsity, nib):
    """a = max(1, round((1 - sparsity) * nib)), evaluated in double precision in that order."""
    return max(1, round_half_away((1.0 - sparsity) * nib))


# ----------------------------------------------------------------------------
# Hash buckets (SPEC 1.2)

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    """SplitMix64's finaliser on Python ints (uint64 with wrap-around)."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def initial_bucket_index(vocab, hashes, buckets):
    """bucket_index[t, j] = mix64(t + (j+1) * golden) mod buckets, as int32 [V, h]."""
    t = np.arange(vocab, dtype=np.uint64)
    out = np.empty((vocab, hashes), dtype=np.int32)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as the SPEC wants
        for j in range(hashes):
            z = t + np.uint64(((j + 1) * _GOLDEN) & _MASK64)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            out[:, j] = (z % np.uint64(buckets)).astype(np.int32)
    return out


# ----------------------------------------------------------------------------
# Top-k with ties to the lower index (every top-k of the SPEC)

# When a list, topk_lower appends the smallest gap between the k-th and the
# (k+1)-th score of each call: tests use it to show a finite-difference step
# cannot flip a selection.
TIE_MARGINS = None


def topk_lower(scores, k):
    """The k largest scores along the last dim, ties to the lower index: their indices
    [..., k], in ascending index order (every use in the model needs the set only).

    torch.topk promises no tie order, so it only supplies the k-th largest value;
    everything above it is taken, and among the scores equal to it the lowest
    indices fill the remaining places."""
    s = scores.detach()
    n = s.shape[-1]
    if TIE_MARGINS is not None and k < n:
        top = s.topk(k + 1, dim=-1).values
        gap = top[..., k - 1] - top[..., k]
        finite = gap[torch.isfinite(gap)]
        TIE_MARGINS.append(float(finite.min()) if finite.numel() else math.inf)
    if k == n:
        return torch.arange(n, device=s.device).expand(s.shape)
    kth = s.topk(k, dim=-1).values[..., k - 1:k]
    above, tied = s > kth, s == kth
    room = k - above.sum(-1, keepdim=True)
    take = above | (tied & (tied.cumsum(-1) <= room))          # exactly k per row
    return take.nonzero()[:, -1].reshape(*s.shape[:-1], k)      # row-major: ascending


# ----------------------------------------------------------------------------
# Layers (SPEC 1.1 - 1.6)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * self.gain


class BlockSparseLinear(nn.Module):
    """y = x W^T + bias with W stored as the a active b x b blocks of every block row."""

    def __init__(self, n_in, n_out, block, sparsity, name="BlockSparseLinear"):
        super().__init__()
        if n_in % block or n_out % block:
            raise ValueError(f"{name}: in = {n_in} and out = {n_out} must be multiples of block = {block}")
        self.n_in, self.n_out, self.b = n_in, n_out, block
        self.nib, self.nob = n_in // block, n_out // block
        self.a = active_blocks(sparsity, self.nib)
        self.values = nn.Parameter(torch.zeros(self.nob, self.a, block, block))
        self.bias = nn.Parameter(torch.zeros(n_out))
        self.register_buffer("col_index", torch.zeros(self.nob, self.a, dtype=torch.int32))

    def dense_weight(self):
        """The dense W [out, in] (for checks, and the all-blocks-active case)."""
        nob, nib, b = self.nob, self.nib, self.b
        blocks = self.values.new_zeros(nob, nib, b, b)
        rows = torch.arange(nob).unsqueeze(1).expand(nob, self.a)
        blocks = blocks.index_put((rows, self.col_index.long()), self.values)
        return blocks.permute(0, 2, 1, 3).reshape(self.n_out, self.n_in)

    def forward(self, x):
        lead = x.shape[:-1]
        x = x.reshape(-1, self.n_in)
        if self.a == self.nib:  # every block active: a dense Linear
            y = F.linear(x, self.dense_weight(), self.bias)
        else:
            M, nob, a, b = x.shape[0], self.nob, self.a, self.b
            # xg[r, n, m*b + k] = x[n, col_index[r, m]*b + k]
            xg = x.view(M, self.nib, b)[:, self.col_index.long()]               # [M, nob, a, b]
            xg = xg.permute(1, 0, 2, 3).reshape(nob, M, a * b)
            # wt[r, m*b + k, i] = values[r, m, i, k] = W[r*b + i, col_index[r, m]*b + k]
            wt = self.values.transpose(2, 3).reshape(nob, a * b, b)
            y = torch.bmm(xg, wt).permute(1, 0, 2).reshape(M, self.n_out) + self.bias
        return y.reshape(*lead, self.n_out)


class HashEmbedding(nn.Module):
    """Sparse hash embedding with importance weights, and the tied hash head."""

    def __init__(self, cfg):
        super().__init__()
        V, h = cfg.vocab_size, cfg.embed_hashes
        self.table = nn.Parameter(torch.zeros(cfg.embed_buckets, cfg.dim))
        self.importance = nn.Parameter(torch.ones(V, h))
        self.register_buffer("bucket_index", torch.zeros(V, h, dtype=torch.int32))

    def forward(self, tokens):                                  # tokens [B, T] -> [B, T, D]
        rows = self.table[self.bucket_index.long()[tokens]]     # [B, T, h, D]
        return (self.importance[tokens].unsqueeze(-1) * rows).sum(-2)

    def head(self, z):                                          # z [N, D] -> logits [N, V]
        """The tied head as written in SPEC 1.2 (tests compare head_cross_entropy against it)."""
        s = z @ self.table.t()                                  # bucket scores [N, buckets]
        bucket_index = self.bucket_index.long()
        logits = 0
        for j in range(bucket_index.shape[1]):
            logits = logits + self.importance[:, j] * s.index_select(1, bucket_index[:, j])
        return logits

    def head_cross_entropy(self, z, targets, chunk=256):
        """Mean CE of the tied head's logits, by chunks of rows, never holding [N, V] logits."""
        # Under autocast the scores come out bf16; the loss runs in the table's
        # precision, as autocast runs cross_entropy (a no-op otherwise).
        s = (z @ self.table.t()).to(self.table.dtype)          # bucket scores [N, buckets]
        total = TiedHeadCrossEntropySum.apply(s, self.importance, self.bucket_index, targets, chunk)
        return total / z.shape[0]


class TiedHeadCrossEntropySum(torch.autograd.Function):
    """sum_n CE(logits[n], targets[n]) with logits[n, t] = sum_j importance[t, j] * s[n, bucket_index[t, j]].

    The same math as HashEmbedding.head + F.cross_entropy, made affordable at
    V = 32000: rows go by chunks, each chunk transposed to [V, C] so that the
    gathers (and the scatter in the gradient) move contiguous rows, and the
    gradients are formed while the chunk's logits are at hand (the loss is a
    scalar, so backward only scales them)."""

    @staticmethod
    def forward(ctx, s, importance, bucket_index, targets, chunk):
        # s: [N, buckets]  importance: [V, h]  bucket_index: [V, h] int32  targets: [N]
        N, V, h = s.shape[0], importance.shape[0], importance.shape[1]
        want_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        grad_s = torch.zeros_like(s) if want_grad else None
        grad_importance = torch.zeros_like(importance) if want_grad else None
        index = [bucket_index[:, j].long() for j in range(h)]
        total = s.new_zeros(())
        for start in range(0, N, chunk):
            sT = s[start:start + chunk].t().contiguous()                    # [buckets, C]
            C = sT.shape[1]
            gathered = [sT.index_select(0, index[j]) for j in range(h)]    # [V, C] each
            logitsT = importance[:, 0:1] * gathered[0]
            for j in range(1, h):
                logitsT.addcmul_(importance[:, j:j + 1], gathered[j])
            lse = torch.logsumexp(logitsT, dim=0)                           # [C]
            tgt = targets[start:start + chunk]
            total += (lse - logitsT.gather(0, tgt.unsqueeze(0))[0]).sum()
            if want_grad:
                dlogitsT = logitsT.sub_(lse).exp_()                         # softmax - onehot
                dlogitsT[tgt, torch.arange(C)] -= 1.0
                dsT = sT.new_zeros(sT.shape)
                for j in range(h):
                    dsT.index_add_(0, index[j], dlogitsT * importance[:, j:j + 1])
                    grad_importance[:, j] += (dlogitsT * gathered[j]).sum(1)
                grad_s[start:start + C] = dsT.t()
        ctx.save_for_backward(grad_s, grad_importance)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_s, grad_importance = ctx.saved_tensors
        return grad_total * grad_s, grad_total * grad_importance, None, None, None


class CausalConvMixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.kernel = cfg.mixer_kernel
        self.conv = nn.Parameter(torch.zeros(cfg.dim, cfg.mixer_kernel))
        self.out = BlockSparseLinear(cfg.dim, cfg.dim, cfg.sparse_block, cfg.mixer_sparsity, "mixer.out")

    def forward(self, u):                                       # u [B, T, D]
        T, K = u.shape[1], self.kernel
        padded = F.pad(u, (0, 0, K - 1, 0))                     # padded[:, s] = u[:, s - (K-1)]
        # c[t] = sum_i conv[:, i] * u[t - i]: conv[:, 0] weighs the current token
        c = sum(self.conv[:, i] * padded[:, K - 1 - i:K - 1 - i + T] for i in range(K))
        return self.out(F.silu(c))


def memory_select(s1, s2, k):
    """Product-key selection. s1, s2: [N, n] half-key scores.

    Returns sigma [N, k] (differentiable) and slot ids [N, k] (I_p * n + J_q)."""
    N, n = s1.shape
    I, J = topk_lower(s1, k), topk_lower(s2, k)                 # [N, k] each, ascending
    a, c = s1.gather(1, I), s2.gather(1, J)
    # All k*k pairs, p-major: with I and J ascending the slot ids I_p*n + J_q
    # ascend along the row, so topk_lower's lower-position rule is the SPEC's
    # lower-slot-id rule.
    cand = (a.unsqueeze(2) + c.unsqueeze(1)).reshape(N, k * k)
    ids = (I.unsqueeze(2) * n + J.unsqueeze(1)).reshape(N, k * k)
    best = topk_lower(cand, k)
    return cand.gather(1, best), ids.gather(1, best)


class MemoryBank(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, n, dk = cfg.dim, cfg.memory_n, cfg.memory_key_dim
        self.n, self.topk, self.dh = n, cfg.memory_topk, dk // 2
        self.query = nn.Linear(D, dk, bias=True)
        self.keys1 = nn.Parameter(torch.zeros(n, self.dh))
        self.keys2 = nn.Parameter(torch.zeros(n, self.dh))
        self.values = nn.Parameter(torch.zeros(n * n, D))

    def forward(self, u):                                       # u [B, T, D]
        x = u.reshape(-1, u.shape[-1])
        q = self.query(x)                                       # [N, 2*dh]
        s1 = q[:, :self.dh] @ self.keys1.t()                    # [N, n]
        s2 = q[:, self.dh:] @ self.keys2.t()
        sigma, slots = memory_select(s1, s2, self.topk)
        w = torch.softmax(sigma, dim=-1)                        # [N, k]
        out = F.embedding_bag(slots, self.values, per_sample_weights=w.to(self.values.dtype), mode="sum")
        return out.reshape(u.shape)


def moe_route(rg, re_, groups, experts_per_group, group_k, k):
    """Tree routing. rg [N, G], re_ [N, G*E] router logits.

    Returns experts [N, k] (expert ids), gates [N, k] and the joint P [N, G*E]."""
    N, G, E = rg.shape[0], groups, experts_per_group
    pg = torch.softmax(rg, dim=-1)
    pe = torch.softmax(re_.reshape(N, G, E), dim=-1)
    P = (pg.unsqueeze(2) * pe).reshape(N, G * E)
    kept = topk_lower(pg, group_k)                              # [N, group_k]
    keep = torch.zeros(N, G, dtype=torch.bool, device=rg.device).scatter_(1, kept, True)
    keep = keep.repeat_interleave(E, dim=1)                     # expert e is in group e // E
    experts = topk_lower(P.detach().masked_fill(~keep, -math.inf), k)
    chosen = P.gather(1, experts)
    return experts, chosen / chosen.sum(-1, keepdim=True), P


class Expert(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.up = BlockSparseLinear(cfg.dim, cfg.moe_hidden, cfg.sparse_block, cfg.moe_sparsity, "moe.up")
        self.down = BlockSparseLinear(cfg.moe_hidden, cfg.dim, cfg.sparse_block, cfg.moe_sparsity, "moe.down")

    def forward(self, u):
        return self.down(F.gelu(self.up(u), approximate="tanh"))


class HierarchicalMoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.G, self.E, self.group_k, self.k = cfg.moe_groups, cfg.moe_experts_per_group, cfg.moe_group_k, cfg.moe_k
        self.router_group = nn.Linear(cfg.dim, self.G, bias=False)
        self.router_expert = nn.Linear(cfg.dim, self.G * self.E, bias=False)
        self.experts = nn.ModuleList(Expert(cfg) for _ in range(self.G * self.E))

    def forward(self, u):                                       # u [B, T, D] -> (out, aux)
        x = u.reshape(-1, u.shape[-1])
        N, n_experts = x.shape[0], self.G * self.E
        experts, gates, P = moe_route(self.router_group(x), self.router_expert(x), self.G, self.E,
                                      self.group_k, self.k)
        out = torch.zeros_like(x)
        self.mark_lora_rows(experts)
        for e, expert in enumerate(self.experts):               # grouped by expert, no token dropped
            tok, slot = (experts == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = expert(x[tok]) * gates[tok, slot].unsqueeze(1)
            out = out.index_add(0, tok, y)
        # Switch load balance: f counts selections (no gradient), Pbar carries it.
        f = torch.bincount(experts.reshape(-1), minlength=n_experts).to(x.dtype) / (N * self.k)
        aux = n_experts * (f * P.mean(0)).sum()
        return out.reshape(u.shape), aux


    def mark_lora_rows(self, experts):
        """LoRA dropout draws one mask over the rows of all experts in expert order
        (tokens ascending within one), keyed by the first adapted expert."""
        counts = torch.bincount(experts.reshape(-1), minlength=len(self.experts)).tolist()
        for part in ("up", "down"):
            layers = [getattr(expert, part) for expert in self.experts]
            first = next((layer for layer in layers if hasattr(layer, "lora_a")), None)
            row = 0
            for layer, count in zip(layers, counts):
                if first is not None:
                    layer.lora_mask_at = (first.lora_name, row)
                row += count


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.mix_norm = RMSNorm(cfg.dim)
        self.mixer = CausalConvMixer(cfg)
        self.has_memory = layer in cfg.memory_layers
        if self.has_memory:
            self.mem_norm = RMSNorm(cfg.dim)
            self.memory = MemoryBank(cfg)
        self.moe_norm = RMSNorm(cfg.dim)
        self.moe = HierarchicalMoE(cfg)

    def forward(self, x):
        x = x + self.mixer(self.mix_norm(x))
        if self.has_memory:
            x = x + self.memory(self.mem_norm(x))
        y, aux = self.moe(self.moe_norm(x))
        return x + y, aux


# ----------------------------------------------------------------------------
# Model (SPEC 1)


class SHAMN(nn.Module):
    """Parameters and buffers are registered under the SPEC 4 dotted names."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = HashEmbedding(cfg)
        self.layers = nn.ModuleList(Block(cfg, l) for l in range(cfg.n_layers))
        self.final_norm = RMSNorm(cfg.dim)
        if not cfg.embed_tie_head:
            self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, tokens, targets):
        """tokens, targets: [B, T] int64. Returns (loss, ce, aux), aux = mean over layers."""
        x = self.embed(tokens)
        auxes = []
        for layer in self.layers:
            x, aux = layer(x)
            auxes.append(aux)
        z = self.final_norm(x).reshape(-1, self.cfg.dim)
        if self.cfg.embed_tie_head:
            ce = self.embed.head_cross_entropy(z, targets.reshape(-1))
        else:
            ce = F.cross_entropy(self.head(z), targets.reshape(-1))
        aux = torch.stack(auxes).mean()
        return ce + self.cfg.moe_aux_coef * aux, ce, aux


def decays(name):
    """SPEC 3: weight decay on matrices, tables, keys, block values; never gains, biases, importance."""
    return not (name.endswith(".gain") or name.endswith(".bias") or name == "embed.importance")


def make_adamw(named, lr, weight_decay):
    """AdamW over SPEC 3's two decay groups, with the SPEC's betas and eps."""
    groups = [{"params": [p for n, p in named if decays(n)], "weight_decay": weight_decay},
              {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)


# ----------------------------------------------------------------------------
# Init (this reference's own, seeded; the SPEC fixes only bucket_index's rule)


@torch.no_grad()
def init_model(model, seed=0, std=0.02):
    """Weights normal(0, std), memory keys normal(0, 1/sqrt(dh)), gains and importance 1,
    biases 0, col_index drawn per SPEC 1.3, bucket_index by SPEC 1.2's mix64 rule.

    One torch.Generator seeded with `seed` is consumed in named_parameters order,
    then col_index buffers in named_buffers order."""
    cfg = model.cfg
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith(".gain") or name == "embed.importance":
            p.fill_(1.0)
        elif name.endswith(".bias"):
            p.zero_()
        elif name.endswith(".keys1") or name.endswith(".keys2"):
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / math.sqrt(p.shape[1]))
        else:
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)
    for name, buf in model.named_buffers():
        if name.endswith("col_index"):
            nob, a = buf.shape
            owner = model.get_submodule(name.rsplit(".", 1)[0])
            for r in range(nob):  # a distinct column blocks per block row, sorted ascending
                buf[r] = torch.randperm(owner.nib, generator=gen)[:a].sort().values.to(torch.int32)
    model.embed.bucket_index.copy_(torch.from_numpy(
        initial_bucket_index(cfg.vocab_size, cfg.embed_hashes, cfg.embed_buckets)))
    return model


# ----------------------------------------------------------------------------
# Checkpoints (SPEC 4)


class CheckpointError(ValueError):
    pass


def dataset_path(name):
    return "/model/" + name.replace(".", "/")


def read_group(f, root="model"):
    """Every dataset under /root as {dotted name: numpy array}."""
    out = {}
    if root not in f:
        return out

    def visit(path, obj):
        if isinstance(obj, h5py.Dataset):
            out[path.replace("/", ".")] = obj[()]
    f[root].visititems(visit)
    return out


def _attr_text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape == ():  # scalar stored as array
        return _attr_text(value[()])
    return str(value)


def write_tensors(path, tensors, cfg, step=0, kind=None):
    """tensors: {dotted name: torch tensor}; float tensors are stored as float32, int as int32."""
    with h5py.File(path, "w") as f:
        f.attrs["config"] = cfg.to_toml()
        f.attrs["format_version"] = np.int64(FORMAT_VERSION)
        f.attrs["step"] = np.int64(step)
        if kind is not None:
            f.attrs["kind"] = kind
        for name, t in tensors.items():
            arr = t.detach().cpu().numpy()
            arr = arr.astype(np.float32 if np.issubdtype(arr.dtype, np.floating) else np.int32)
            f.create_dataset(dataset_path(name), data=arr)


def save_checkpoint(path, model, step=0):
    write_tensors(path, model.state_dict(), model.cfg, step)


def _check_index_buffers(model):
    """Saved index buffers are used as they are, so reject ones that would index out of range."""
    problems = []
    bi = model.embed.bucket_index
    if bi.numel() and (int(bi.min()) < 0 or int(bi.max()) >= model.cfg.embed_buckets):
        problems.append(f"embed.bucket_index: values must lie in [0, {model.cfg.embed_buckets})")
    for name, mod in model.named_modules():
        if isinstance(mod, BlockSparseLinear):
            ci = mod.col_index.long()
            if ci.numel() and (int(ci.min()) < 0 or int(ci.max()) >= mod.nib or
                               (mod.a > 1 and not bool((ci[:, 1:] > ci[:, :-1]).all()))):
                problems.append(f"{name}.col_index: each row must be strictly ascending in [0, {mod.nib})")
    if problems:
        raise CheckpointError("; ".join(problems))


def load_checkpoint(path, dtype=torch.float32):
    """Returns (model, step). Rejects missing, extra, mis-shaped or mis-typed tensors, naming each."""
    with h5py.File(path, "r") as f:
        if "config" not in f.attrs:
            raise CheckpointError(f"{path}: no `config` attribute on /")
        version = int(f.attrs.get("format_version", -1))
        if version != FORMAT_VERSION:
            raise CheckpointError(f"{path}: format_version = {version}, this reader knows {FORMAT_VERSION}")
        cfg = parse_model_config(_attr_text(f.attrs["config"]), source=f"{path}:/config")
        step = int(f.attrs.get("step", 0))
        stored = read_group(f)
    model = SHAMN(cfg)
    expected = model.state_dict()
    problems = []
    for name in sorted(set(expected) - set(stored)):
        problems.append(f"missing {dataset_path(name)} {list(expected[name].shape)}")
    for name in sorted(set(stored) - set(expected)):
        problems.append(f"unexpected {dataset_path(name)} {list(stored[name].shape)}")
    for name in sorted(set(expected) & set(stored)):
        want, got = expected[name], stored[name]
        want_dtype = np.int32 if not want.is_floating_point() else np.float32
        if list(got.shape) != list(want.shape):
            problems.append(f"{dataset_path(name)} has shape {list(got.shape)}, expected {list(want.shape)}")
        elif got.dtype != want_dtype:
            problems.append(f"{dataset_path(name)} has dtype {got.dtype}, expected {np.dtype(want_dtype)}")
    if problems:
        raise CheckpointError(f"{path}: " + "; ".join(problems))
    model.load_state_dict({name: torch.from_numpy(np.ascontiguousarray(arr)) for name, arr in stored.items()})
    _check_index_buffers(model)
    return model.to(dtype), step


def base_checksum(model):
    """CRC-32 (zlib) of every tensor but the LoRA adapters, in name order: each as its
    dotted name, a NUL, its dtype ("f32", "i32"), a NUL, its dims as little-endian int64
    and its bytes (float tensors as float32). shamn's layers/lora.h: base_checksum."""
    crc = 0
    for name, t in sorted(model.state_dict().items()):
        if name.endswith((".lora_a", ".lora_b")):
            continue
        t = t.detach().cpu()
        t = t.float() if t.is_floating_point() else t.int()
        dtype = b"f32" if t.dtype == torch.float32 else b"i32"
        crc = zlib.crc32(name.encode() + b"\0" + dtype + b"\0", crc)
        crc = zlib.crc32(np.asarray(t.shape, dtype="<i8").tobytes(), crc)
        crc = zlib.crc32(np.ascontiguousarray(t.numpy()).tobytes(), crc)
    return crc


# LoRA dropout (shamn's lora.dropout, outside the SPEC; its masks as
# experiments/lora.md "LoRA dropout: the masks" defines them). None, or
# (p, pass seed) while a training pass's masks are drawn.
LORA_DROPOUT = None
_M32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter, stream, seed):
    """Philox4x32-10 (Salmon et al., 2011) on an array of 64-bit counters: the
    counter's low and high words and the stream's as the block, the seed as the
    key. Returns the four output words, each an array like counter."""
    u = np.uint64
    c0, c1 = counter & _M32, counter >> u(32)
    c2, c3 = np.full_like(c0, u(stream) & _M32), np.full_like(c0, u(stream) >> u(32))
    k0, k1 = u(seed) & _M32, u(seed) >> u(32)
    for _ in range(10):
        p0, p1 = u(0xD2511F53) * c0, u(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> u(32)) ^ c1 ^ k0, p1 & _M32, (p0 >> u(32)) ^ c3 ^ k1, p0 & _M32
        k0, k1 = (k0 + u(0x9E3779B9)) & _M32, (k1 + u(0xBB67AE85)) & _M32
    return c0, c1, c2, c3


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def pass_seed(seed, pass_number):
    """The seed of one forward pass's masks, drawn from the run's seed."""
    w = philox4x32(np.array([pass_number], dtype=np.uint64), 0x4C6F5241, seed)
    return (int(w[0][0]) << 32) | int(w[1][0])


def dropout_keep(p, seed, stream, start, count):
    """Whether elements start .. start + count - 1 of a masked tensor are kept:
    element i reads word (i % 64) // 16 of Philox block 16 (i // 64) + i % 16,
    kept when it is below round((1 - p) 2^32), at most 2^32 - 1."""
    i = np.arange(start, start + count, dtype=np.uint64)
    e = i % np.uint64(64)
    words = np.stack(philox4x32((i // np.uint64(64)) * np.uint64(16) + e % np.uint64(16), stream, seed))
    word = words[(e // np.uint64(16)).astype(np.int64), np.arange(count)]
    below = min(math.floor((1.0 - p) * 4294967296.0 + 0.5), 0xFFFFFFFF)
    return word < np.uint64(below)


def lora_dropout(x, key_name, first_row):
    """Inverted dropout of x (rows of its last dimension) under the current pass:
    its rows are rows first_row.. of the tensor whose masks key_name keys."""
    if LORA_DROPOUT is None:
        return x
    p, seed = LORA_DROPOUT
    width = x.shape[-1]
    keep = dropout_keep(p, seed, fnv1a64(key_name + ".lora_dropout"), first_row * width, x.numel())
    factor = torch.tensor(1.0 / (1.0 - p), dtype=x.dtype)
    return x * (torch.from_numpy(keep).to(x.dtype).reshape(x.shape) * factor)


class LoraHook:
    """LoRA (Hu et al., 2021) as a forward hook on the adapted module:
    y = module(x) + (alpha / rank) * (dropout(x) A^T) B^T, with A = module.lora_a [rank, in]
    and B = module.lora_b [out, rank]. The MoE calls each expert's up/down on its own tokens,
    so an expert's adapter sees exactly its routed rows; under dropout it sets
    module.lora_mask_at to (the first adapted expert's name, the rows' first row among
    all experts' rows), one mask over them all."""

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, module, inputs, output):
        key_name, first_row = getattr(module, "lora_mask_at", (module.lora_name, 0))
        x = lora_dropout(inputs[0], key_name, first_row)
        return output + self.scale * F.linear(F.linear(x, module.lora_a), module.lora_b)


def attach_adapters(model, path, base_path):
    """Puts the adapters of a shamn LoRA checkpoint on `model` (its base, from base_path).
    Refuses adapters trained on another base (by base_checksum). The base keeps
    requires_grad (torch's embedding_bag cannot take frozen values with trainable
    weights); its gradients are computed and not saved (save_gradients' lora_only)."""
    with h5py.File(path, "r") as f:
        if "lora_base_crc32" not in f.attrs:
            raise CheckpointError(f"{path}: not a LoRA adapter checkpoint (no lora_base_crc32 attribute)")
        rank, alpha = int(f.attrs["lora_rank"]), float(f.attrs["lora_alpha"])
        # rsLoRA (absent in checkpoints from before it): alpha / sqrt(rank).
        rslora = int(f.attrs.get("lora_rslora", 0)) == 1
        want = int(f.attrs["lora_base_crc32"])
        stored = read_group(f)
    got = base_checksum(model)
    if got != want:
        raise CheckpointError(f"{path}: adapters trained on another base (crc32 {want:08x}) than "
                              f"{base_path} (crc32 {got:08x})")
    dtype = next(model.parameters()).dtype
    hosts = sorted({name.rsplit(".", 1)[0] for name in stored})
    for name in hosts:
        a, b = stored.get(name + ".lora_a"), stored.get(name + ".lora_b")
        module = model.get_submodule(name)
        n_in, n_out = (module.in_features, module.out_features) if isinstance(module, nn.Linear) else \
            (module.n_in, module.n_out)
        if a is None or b is None or a.shape != (rank, n_in) or b.shape != (n_out, rank):
            raise CheckpointError(f"{path}: {name} needs lora_a [{rank}, {n_in}] and lora_b [{n_out}, {rank}]")
        module.register_parameter("lora_a", nn.Parameter(torch.from_numpy(a).to(dtype)))
        module.register_parameter("lora_b", nn.Parameter(torch.from_numpy(b).to(dtype)))
        module.lora_name = name
        module.register_forward_hook(LoraHook(alpha / (math.sqrt(rank) if rslora else rank)))
    return len(hosts)


def save_gradients(path, model, step=0, lora_only=False):
    """Every parameter's gradient (zeros where none flowed) under /model/<name>, kind =
    gradients; with lora_only, the adapters' only (what shamn writes for a frozen base)."""
    grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p))
             for name, p in model.named_parameters() if not lora_only or name.endswith((".lora_a", ".lora_b"))}
    write_tensors(path, grads, model.cfg, step, kind="gradients")


# ----------------------------------------------------------------------------
# Token files (llm.c format)

TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1


def write_tokens(path, tokens):
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 65535):
        raise ValueError("tokens must fit in uint16")
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (TOKENS_MAGIC, TOKENS_VERSION, tokens.size)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def read_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if header.size != 256 or header[0] != TOKENS_MAGIC or header[1] != TOKENS_VERSION:
            raise ValueError(f"{path}: not an llm.c token file (magic {TOKENS_MAGIC}, version {TOKENS_VERSION})")
        count = int(header[2])
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    if tokens.size != count:
        raise ValueError(f"{path}: header says {count} tokens, file holds {tokens.size}")
    return tokens


def make_batch(tokens, B, T, vocab_size=None):
    """Windows i = 0..B-1: inputs tokens[i*T : i*T+T], targets tokens[i*T+1 : i*T+T+1]."""
    need = B * T + 1
    if len(tokens) < need:
        raise ValueError(f"batch {B} x seq {T} needs {need} tokens, the file holds {len(tokens)}")
    t = torch.from_numpy(tokens[:need].astype(np.int64))
    if vocab_size is not None and int(t.max()) >= vocab_size:
        raise ValueError(f"token {int(t.max())} is outside the vocabulary of {vocab_size}")
    return t[:B * T].view(B, T), t[1:need].view(B, T)


# ----------------------------------------------------------------------------
# CLI


def cmd_loss(args):
    dtype = torch.float64 if args.double else torch.float32
    model, step = load_checkpoint(args.checkpoint, dtype)
    if args.adapter:
        attach_adapters(model, args.adapter, args.checkpoint)
    inputs, targets = make_batch(read_tokens(args.data), args.batch, args.seq, model.cfg.vocab_size)
    global LORA_DROPOUT
    if args.lora_dropout > 0:
        if not args.adapter:
            raise SystemExit("--lora-dropout needs --adapter")
        LORA_DROPOUT = (args.lora_dropout, pass_seed(args.seed, args.pass_number))
    with torch.set_grad_enabled(bool(args.grads)):
        loss, ce, aux = model(inputs, targets)
    if args.grads:
        loss.backward()
        save_gradients(args.grads, model, step, lora_only=bool(args.adapter))
    print(json.dumps({"loss": loss.item(), "ce": ce.item(), "aux": aux.item()}))


def cmd_init(args):
    cfg = load_config(args.config)
    model = init_model(SHAMN(cfg), seed=args.seed, std=args.std)
    save_checkpoint(args.output, model, step=0)


def cmd_make_tokens(args):
    gen = np.random.default_rng(args.seed)
    write_tokens(args.output, gen.integers(0, args.vocab, size=args.count, dtype=np.int64))


def cmd_bench(args):
    cfg = load_config(args.config) if args.config else ModelConfig()
    model = init_model(SHAMN(cfg), seed=args.seed)
    gen = np.random.default_rng(args.seed)
    tokens = gen.integers(0, cfg.vocab_size, size=args.batch * args.seq + 1)
    inputs, targets = make_batch(tokens, args.batch, args.seq)
    named = list(model.named_parameters())
    optim = make_adamw(named, lr=3e-4, weight_decay=0.1)
    params = [p for _, p in named]
    # --autocast bf16: PyTorch's own mixed precision (its CPU autocast runs the
    # matmul-like ops in bf16, the rest in f32), for shamn's train.precision.
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast == "bf16"
                else contextlib.nullcontext())
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        times = []
        for i in range(args.warmup + args.steps):
            start = time.perf_counter()
            optim.zero_grad(set_to_none=True)
            with autocast:
                loss, _, _ = model(inputs, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optim.step()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(json.dumps({"threads": threads, "batch": args.batch, "seq": args.seq,
                          "tokens_per_s": args.batch * args.seq / median, "step_s_median": median,
                          "step_s_min": min(times),
                          "step_s_all": [round(t, 4) for t in times], "warmup": args.warmup,
                          "loss": loss.item(), "autocast": args.autocast, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                          "loadavg_1m": os.getloadavg()[0]}), flush=True)


def lr_at(step, lr, min_lr, warmup, max_steps):
    """SPEC 3's schedule, 0-based step: linear warm-up, then cosine down to min_lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    progress = (step - warmup) / (max_steps - warmup)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def validation_ce(model, tokens, B, T, batches, autocast):
    """Mean cross-entropy over the first `batches` consecutive batches of B windows of T
    tokens (window w: inputs tokens[w T : w T + T], targets one further), as shamn's
    trainer evaluates; each batch's mean, then their mean."""
    need = B * T + 1
    batches = min(batches, (len(tokens) - 1) // T // B)
    if batches < 1:
        raise ValueError(f"the validation file holds {len(tokens)} tokens, fewer than one batch of {B} x {T}")
    losses = []
    for i in range(batches):
        inputs, targets = make_batch(tokens[i * B * T:i * B * T + need], B, T, model.cfg.vocab_size)
        with autocast():
            _, ce, _ = model(inputs, targets)
        losses.append(ce.float().item())
    return sum(losses) / len(losses)


def cmd_train(args):
    """Trains a freshly initialised model on a token file: random windows, AdamW with
    SPEC 3's decay groups and schedule, clipping; one JSON line per evaluation."""
    for name in ("batch", "seq", "steps", "eval_batches", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0 <= args.warmup <= args.steps:
        raise ValueError(f"--warmup must lie in [0, --steps = {args.steps}], got {args.warmup}")
    cfg = load_config(args.config)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = init_model(SHAMN(cfg), seed=args.seed)
    train, val = read_tokens(args.train), read_tokens(args.val)
    if len(train) < args.seq + 1:
        raise ValueError(f"{args.train}: {len(train)} tokens, fewer than one window of {args.seq + 1}")
    named = list(model.named_parameters())
    optim = make_adamw(named, lr=args.lr, weight_decay=args.weight_decay)
    params = [p for _, p in named]
    # The forward (and evaluation) under autocast, as `bench --autocast` runs it.
    def autocast():
        return (torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast == "bf16"
                else contextlib.nullcontext())
    gen = np.random.default_rng(args.seed)
    every = args.eval_every or args.steps
    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        starts = gen.integers(0, len(train) - args.seq, size=args.batch)
        window = np.stack([train[s:s + args.seq + 1] for s in starts]).astype(np.int64)
        if int(window.max()) >= cfg.vocab_size:
            raise ValueError(f"{args.train}: token {int(window.max())} is outside the vocabulary of "
                             f"{cfg.vocab_size}")
        batch = torch.from_numpy(window)
        for g in optim.param_groups:
            g["lr"] = lr_at(step, args.lr, args.min_lr, args.warmup, args.steps)
        optim.zero_grad(set_to_none=True)
        with autocast():
            loss, _, _ = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, args.clip)
        optim.step()
        times.append(time.perf_counter() - start)
        if (step + 1) % every == 0 or step + 1 == args.steps:
            ce = validation_ce(model, val, args.batch, args.seq, args.eval_batches, autocast)
            print(json.dumps({"step": step + 1, "train_loss": loss.float().item(), "val_loss": ce,
                              "val_ppl": math.exp(ce), "autocast": args.autocast, "seed": args.seed,
                              "tokens_per_s": args.batch * args.seq / statistics.median(times[1:] or times)}),
                  flush=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="shamn_ref.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("loss", help="loss (and gradients) of a checkpoint on the first batch of a token file")
    p.add_argument("checkpoint")
    p.add_argument("--data", required=True, help="llm.c token file")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--grads", help="write every parameter's gradient to this HDF5 file")
    p.add_argument("--adapter", help="shamn LoRA adapter checkpoint trained on this base (then --grads "
                   "holds the adapters' gradients only)")
    p.add_argument("--double", action="store_true", help="compute in float64")
    p.add_argument("--lora-dropout", type=float, default=0.0,
                   help="with --adapter: dropout at this rate on the adapters' inputs, with the masks of "
                   "shamn training's forward pass --pass of a run with train.seed = --seed")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pass", dest="pass_number", type=int, default=0)
    p.set_defaults(run=cmd_loss)

    p = sub.add_parser("init", help="write a freshly initialised checkpoint")
    p.add_argument("config")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--std", type=float, default=0.02, help="std of the normal weight init")
    p.set_defaults(run=cmd_init)

    p = sub.add_parser("make-tokens", help="random tokens in llm.c format")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(run=cmd_make_tokens)

    p = sub.add_parser("bench", help="training-step throughput (forward, backward, clip, AdamW)")
    p.add_argument("--config", help="model TOML (default: the SPEC defaults)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--autocast", choices=["none", "bf16"], default="none",
                   help="run the forward under torch.autocast (bf16)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=cmd_bench)

    p = sub.add_parser("train", help="train a freshly initialised model on a token file (quality runs)")
    p.add_argument("config", help="model TOML (a shamn config's [model] tables; other tables are ignored)")
    p.add_argument("--train", required=True, help="llm.c token file to train on")
    p.add_argument("--val", required=True, help="llm.c token file to evaluate on")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr", type=float, default=2e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=0, help="steps between evaluations (0: at the end)")
    p.add_argument("--eval-batches", type=int, default=16)
    p.add_argument("--autocast", choices=["none", "bf16"], default="none",
                   help="run the forward and evaluation under torch.autocast (bf16)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(run=cmd_train)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (ConfigError, CheckpointError, ValueError, OSError) as err:
        print(f"shamn_ref: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
