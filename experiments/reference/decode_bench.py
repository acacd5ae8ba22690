#!/usr/bin/python3
"""Greedy decode throughput of the PyTorch reference (the issue 5 baseline).

Two ways to decode batch 1 with the reference model, one token per step:

- window: what a PyTorch user without a cache does. Every step reruns the full
  forward over the last R tokens, R = n_layers * (kernel - 1) + 1, the model's
  receptive field (the causal conv is its only token mixing; memory and MoE act
  per token), so the last position's logits equal a full-context forward's.
- incremental: a fair baseline. Each layer keeps its last kernel - 1 conv
  inputs (SPEC 1.4) and a step runs the model on the new token alone, through
  the reference's own modules, so quantize_dynamic reaches it too.
- window_all_rows: window, but the head runs on every position of the window
  and only the last row is kept (the plainest user code; an extra mode, not
  in the default --modes).

--check first prints one line with how far both modes' logits are from a
full-context forward over the prompt and the generated tokens.

    /usr/bin/python3 experiments/reference/decode_bench.py --config CONFIG.toml --seed 1
    /usr/bin/python3 experiments/reference/decode_bench.py --checkpoint CKPT.h5 [--data TOK.bin]
    /usr/bin/python3 experiments/reference/decode_bench.py ... --quantize-dynamic

One JSON line per (mode, quant, threads). Self-tests: test_decode_bench.py.
"""

import argparse
import json
import os
import statistics
import sys
import time

if __name__ == "__main__":
    # Sleeping OpenMP waits, as shamn_ref.py bench: spinning threads on the
    # shared 2-core box are slowed by several times. Must precede the torch import.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shamn_ref as ref  # noqa: E402


def receptive_field(cfg):
    return cfg.n_layers * (cfg.mixer_kernel - 1) + 1


def head_logits(model, z):                                      # z [N, D] -> [N, V]
    return model.embed.head(z) if model.cfg.embed_tie_head else model.head(z)


def hidden_states(model, tokens):                               # tokens [1, T] -> [T, D] before final_norm
    x = model.embed(tokens)
    for layer in model.layers:
        x, _ = layer(x)
    return x[0]


def all_logits(model, tokens):
    """Logits at every position of one sequence [T] (the full-context forward)."""
    return head_logits(model, model.final_norm(hidden_states(model, tokens.view(1, -1))))


def last_logits(model, tokens):
    """Logits [V] at the last position of tokens [T]; only that row goes through the head."""
    return head_logits(model, model.final_norm(hidden_states(model, tokens.view(1, -1))[-1:]))[0]


class WindowDecoder:
    """head_rows "last" sends only the last position through the head; "all" is the
    plainest user code (logits at every position, keep the last row)."""

    def __init__(self, model, window=None, head_rows="last"):
        self.model = model
        self.window = window or receptive_field(model.cfg)
        self.head_rows = head_rows
        self.context = []

    def prefill(self, tokens):
        self.context = list(tokens)[-self.window:]

    def step(self, token):
        self.context = (self.context + [token])[-self.window:]
        if self.head_rows == "all":
            return all_logits(self.model, torch.tensor(self.context))[-1]
        return last_logits(self.model, torch.tensor(self.context))


class IncrementalDecoder:
    def __init__(self, model):
        self.model = model
        self.history = []

    def prefill(self, tokens):
        K, D = self.model.cfg.mixer_kernel, self.model.cfg.dim
        # history[l][i - 1] = layer l's conv input at t - i; zeros are the
        # SPEC's padding before the sequence start.
        self.history = [torch.zeros(K - 1, D, dtype=self.model.final_norm.gain.dtype)
                        for _ in self.model.layers]
        for token in tokens:
            self.step(token)

    def step(self, token):
        model, K = self.model, self.model.cfg.mixer_kernel
        x = model.embed(torch.tensor([[token]]))                # [1, 1, D]
        for l, layer in enumerate(model.layers):
            u = layer.mix_norm(x)[0]                            # [1, D]
            conv, past = layer.mixer.conv, self.history[l]
            c = u * conv[:, 0] + (past * conv[:, 1:].t()).sum(0)
            self.history[l] = torch.cat([u, past])[:K - 1]
            x = x + layer.mixer.out(F.silu(c)).view_as(x)
            if layer.has_memory:
                x = x + layer.memory(layer.mem_norm(x))
            y, _ = layer.moe(layer.moe_norm(x))
            x = x + y
        return head_logits(model, model.final_norm(x[0]))[0]


DECODERS = {"window": WindowDecoder,
            "window_all_rows": lambda model: WindowDecoder(model, head_rows="all"),
            "incremental": IncrementalDecoder}


@torch.no_grad()
def greedy_decode(decoder, prompt, n):
    """n greedy tokens after prompt; returns (tokens, seconds). Each timed step feeds
    one token and reads the next from the last position's logits, so the first
    step feeds the prompt's last token (the tokens before it are prefilled, untimed)."""
    decoder.prefill(prompt[:-1])
    token, out = int(prompt[-1]), []
    start = time.perf_counter()
    for _ in range(n):
        token = int(decoder.step(token).argmax())
        out.append(token)
    return out, time.perf_counter() - start


@torch.no_grad()
def check_against_full(model, prompt, n):
    """Largest relative error (over positions, against the row's largest logit) of the
    window and incremental logits against one full-context forward, over the prompt
    and n greedy tokens."""
    generated, _ = greedy_decode(IncrementalDecoder(model), prompt, n)
    tokens = prompt + generated
    full = all_logits(model, torch.tensor(tokens))
    window, incremental = WindowDecoder(model), IncrementalDecoder(model)
    window.prefill([])
    incremental.prefill([])
    errors = {"window": 0.0, "incremental": 0.0}
    for t, token in enumerate(tokens):
        scale = float(full[t].abs().max())
        for name, decoder in (("window", window), ("incremental", incremental)):
            errors[name] = max(errors[name], float((decoder.step(token) - full[t]).abs().max()) / scale)
    return {"check": "logits_vs_full_forward", "positions": len(tokens),
            "receptive_field": receptive_field(model.cfg),
            "window_max_rel_err": errors["window"], "incremental_max_rel_err": errors["incremental"]}


def quantize(model):
    """quantize_dynamic on every nn.Linear; returns the quantised copy and the names
    of the modules it converted (BlockSparseLinear is a custom module: not touched)."""
    qmodel = torch.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    dynamic_linear = torch.nn.quantized.dynamic.Linear
    converted = [name for name, m in qmodel.named_modules() if isinstance(m, dynamic_linear)]
    return qmodel, converted


def load_model(args):
    if args.checkpoint:
        model, _ = ref.load_checkpoint(args.checkpoint)
        return model.eval()
    cfg = ref.load_config(args.config) if args.config else ref.ModelConfig()
    return ref.init_model(ref.SHAMN(cfg), seed=args.seed).eval()


def make_prompt(args, vocab_size):
    if args.data:
        tokens = ref.read_tokens(args.data)
        if tokens.size < args.prompt:
            raise ValueError(f"{args.data}: holds {tokens.size} tokens, the prompt needs {args.prompt}")
        prompt = tokens[:args.prompt].astype(np.int64)
        if prompt.max() >= vocab_size:
            raise ValueError(f"{args.data}: token {prompt.max()} is outside the vocabulary of {vocab_size}")
        return [int(t) for t in prompt]
    gen = np.random.default_rng(args.seed)
    return [int(t) for t in gen.integers(0, vocab_size, size=args.prompt)]


def bench(model, quant, prompt, args, extra):
    for mode in args.modes.split(","):
        if mode not in DECODERS:
            raise ValueError(f"--modes: unknown mode {mode!r} ({', '.join(DECODERS)})")
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            decoder = DECODERS[mode](model)
            greedy_decode(decoder, prompt, args.warmup)
            runs = [greedy_decode(decoder, prompt, args.new_tokens) for _ in range(args.repeats)]
            seconds = [s for _, s in runs]
            median = statistics.median(seconds)
            line = {"mode": mode, "quant": quant, "threads": threads, "prompt": len(prompt),
                    "new_tokens": args.new_tokens, "receptive_field": receptive_field(model.cfg),
                    "tokens_per_s": round(args.new_tokens / median, 2),
                    "ms_per_token": round(1e3 * median / args.new_tokens, 3),
                    "ms_per_token_all": [round(1e3 * s / args.new_tokens, 3) for s in seconds],
                    "repeats": args.repeats, "first_tokens": runs[0][0][:8],
                    "same_tokens_every_repeat": all(r[0] == runs[0][0] for r in runs)}
            line.update(extra)
            line.update({"omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                         "loadavg_1m": round(os.getloadavg()[0], 2)})
            print(json.dumps(line), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="decode_bench.py", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="SPEC 4 checkpoint (HDF5)")
    source.add_argument("--config", help="model TOML, freshly initialised with --seed (default: SPEC defaults)")
    parser.add_argument("--seed", type=int, default=1, help="init seed, and the random prompt's seed")
    parser.add_argument("--data", help="llm.c token file: the prompt is its first --prompt tokens "
                                       "(default: random tokens)")
    parser.add_argument("--prompt", type=int, default=16, help="prompt length P")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per repeat N")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--modes", default="window,incremental")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=4, help="untimed tokens before the repeats")
    parser.add_argument("--quantize-dynamic", action="store_true",
                        help="also run torch.quantization.quantize_dynamic({nn.Linear}, qint8)")
    parser.add_argument("--check", action="store_true",
                        help="first print how far window and incremental logits are from a full forward")
    args = parser.parse_args(argv)
    try:
        if args.prompt < 1 or args.new_tokens < 1 or args.repeats < 1 or args.warmup < 0:
            raise ValueError("--prompt, --new-tokens and --repeats must be >= 1, --warmup >= 0")
        model = load_model(args)
        prompt = make_prompt(args, model.cfg.vocab_size)
        if args.check:
            print(json.dumps(check_against_full(model, prompt, args.new_tokens)), flush=True)
        bench(model, "none", prompt, args, {})
        if args.quantize_dynamic:
            qmodel, converted = quantize(model)
            n_block_sparse = sum(isinstance(m, ref.BlockSparseLinear) for m in qmodel.modules())
            bench(qmodel, "dynamic_qint8", prompt, args,
                  {"qengine": torch.backends.quantized.engine, "converted_linear": len(converted),
                   "converted": sorted({name.split(".")[-1] for name in converted}),
                   "block_sparse_not_converted": n_block_sparse})
    except (ref.ConfigError, ref.CheckpointError, ValueError, OSError) as err:
        print(f"decode_bench: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
