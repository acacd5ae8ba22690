#!/usr/bin/env python3
"""Markdown tables from bench_block_sparse's JSON output (medians of repetitions).

  bench_block_sparse --benchmark_filter='^(sparse|dense)/' --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true --benchmark_out=bsr.json \
      --benchmark_out_format=json
  python3 experiments/bench/block_sparse_table.py bsr.json

With --benchmark_filter='^part/' instead, it prints the per-kernel table.

Effective GFLOP/s count only active blocks: 6 * N * active_weights per fwd+bwd.
"vs dense" compares effective GFLOP/s with the dense baseline's on the same shape
and thread count (dense: 6 * N * in * out); "time/dense" is the plain time ratio.
Real-time figures are the ones the targets refer to; the CPU-time column (process
CPU time, all threads) is given for 1 thread, where it is the figure least
disturbed by other processes sharing the machine.
"""
import json
import re
import sys

TOKENS = 4096


def main(path):
    runs = json.load(open(path))["benchmarks"]
    med = {}
    for r in runs:
        if r.get("aggregate_name") != "median":
            continue
        assert r["time_unit"] == "ms"
        med[r["run_name"]] = r
    dense = {}
    rows = []
    for name, r in med.items():
        m = re.match(r"dense/in(\d+)_out(\d+)/threads:(\d+)", name)
        if m:
            dense[(int(m[1]), int(m[2]), int(m[3]))] = r
            continue
        m = re.match(r"sparse/in(\d+)_out(\d+)/b(\d+)/s([\d.]+)/threads:(\d+)", name)
        if m:
            rows.append((int(m[1]), int(m[2]), int(m[5]), int(m[3]), float(m[4]), r))
    rows.sort(key=lambda t: t[:5])
    parts(med)
    if not rows:
        return
    print("| in x out | threads | block | sparsity | active | time ms | eff GFLOP/s | "
          "vs dense | time/dense | 1-thread CPU: eff GFLOP/s, vs dense |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    last = None
    for i, o, th, b, s, r in rows:
        d = dense[(i, o, th)]
        if last != (i, o, th):
            dflops = 6.0 * TOKENS * i * o
            cpu = ""
            if th == 1:
                cpu = f"{dflops / (d['cpu_time'] * 1e-3) / 1e9:.1f}"
            print(f"| {i}x{o} | {th} | dense | - | - | {d['real_time']:.2f} | "
                  f"{dflops / (d['real_time'] * 1e-3) / 1e9:.1f} | 1 | 1 | {cpu} |")
            last = (i, o, th)
        active = int(r["active"])
        flops = 6.0 * TOKENS * (o // b) * active * b * b
        gf = flops / (r["real_time"] * 1e-3) / 1e9
        dgf = 6.0 * TOKENS * i * o / (d["real_time"] * 1e-3) / 1e9
        cpu = ""
        if th == 1:
            cgf = flops / (r["cpu_time"] * 1e-3) / 1e9
            dcgf = 6.0 * TOKENS * i * o / (d["cpu_time"] * 1e-3) / 1e9
            cpu = f"{cgf:.1f}, {cgf / dcgf:.2f}"
        print(f"| {i}x{o} | {th} | {b} | {s:.2f} | {active} | {r['real_time']:.2f} | "
              f"{gf:.1f} | {gf / dgf:.2f} | {r['real_time'] / d['real_time']:.2f} | {cpu} |")


def parts(med):
    """Per-kernel medians: part/<kernel>/in<in>_out<out>/<b<block>/s<sparsity>|dense>."""
    table = {}
    for name, r in med.items():
        m = re.match(r"part/(\w+)/in(\d+)_out(\d+)/(?:b(\d+)/s([\d.]+)|dense)/threads:(\d+)", name)
        if m:
            key = (int(m[2]), int(m[3]), int(m[6]), int(m[4] or 0), float(m[5] or 0))
            table.setdefault(key, {})[m[1]] = r["real_time"]
    if not table:
        return
    kernels = ["forward", "grad_input", "grad_values", "grad_bias"]
    print("| in x out | threads | block | sparsity | " + " | ".join(k + " ms" for k in kernels) + " |")
    print("|---|---|---|---|" + "---|" * len(kernels))
    for key in sorted(table):
        i, o, th, b, s = key
        cells = [f"{table[key][k]:.2f}" if k in table[key] else "-" for k in kernels]
        print(f"| {i}x{o} | {th} | {b or 'dense'} | {s if b else '-'} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main(sys.argv[1])
