#!/usr/bin/env python3
"""Summarises experiments/batched_infer_bench.sh output: per thread count, the
median prefill (512-token prompt), batch-1 decode and eval tokens/s of each
binary, the median of the per-round new/old ratios (with their range), the
prefill/decode ratio of each run (median), and the many-streams table.

Usage: batched_infer_summary.py RUNS.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    # (bin, threads, metric) -> {round: value}
    vals = defaultdict(dict)
    streams = defaultdict(list)
    for r in rows:
        run, key = r["run"], (r["bin"], r["threads"])
        if "prefill_tok_s" in run:
            if run.get("streams", 1) > 1 or run["prompt_tokens"] != max_prompt(rows):
                if r["bin"] == "new" and run["prompt_tokens"] != max_prompt(rows):
                    streams[run["streams"]].append((run["decode_tok_s"], run["decode_step_ms"]))
                continue
            vals[key + ("prefill",)][r["round"]] = run["prefill_tok_s"]
            vals[key + ("decode",)][r["round"]] = run["decode_tok_s"]
            vals[key + ("ratio",)][r["round"]] = run["prefill_tok_s"] / run["decode_tok_s"]
        else:
            vals[key + ("eval",)][r["round"]] = run["tokens"] / run["seconds"]
            vals[key + ("loss",)][r["round"]] = run["loss"]
    threads = sorted({t for (_, t, _) in vals})
    print("| | " + " | ".join(f"old, {t} thr | new, {t} thr | new / old (range)" for t in threads) + " |")
    print("| --- |" + " ---: |" * (3 * len(threads)))
    for metric, label in [("prefill", "prefill tok/s"), ("decode", "decode tok/s (batch 1)"),
                          ("eval", "eval tok/s"), ("ratio", "prefill / decode, same run")]:
        cells = []
        for t in threads:
            old, new = vals[("base", t, metric)], vals[("new", t, metric)]
            cells.append(f"{statistics.median(old.values()):,.2f}" if metric == "ratio"
                         else f"{statistics.median(old.values()):,.0f}")
            cells.append(f"{statistics.median(new.values()):,.2f}" if metric == "ratio"
                         else f"{statistics.median(new.values()):,.0f}")
            if metric == "ratio":
                cells.append("")
            else:
                pair = [new[k] / old[k] for k in new if k in old]
                cells.append(f"{statistics.median(pair):.2f}x ({min(pair):.2f}-{max(pair):.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    for t in threads:
        for b in ("base", "new"):
            losses = set(vals[(b, t, "loss")].values())
            print(f"eval loss, {b}, {t} thread(s): {', '.join(repr(x) for x in sorted(losses))}")
    if streams:
        print("\n| streams B | decode tok/s (all streams) | ms per step |\n| ---: | ---: | ---: |")
        for b in sorted(streams):
            print(f"| {b} | {statistics.median(s for s, _ in streams[b]):,.0f} | "
                  f"{statistics.median(m for _, m in streams[b]):.2f} |")


def max_prompt(rows, cache={}):
    if "p" not in cache:
        cache["p"] = max(r["run"]["prompt_tokens"] for r in rows if "prompt_tokens" in r["run"])
    return cache["p"]


if __name__ == "__main__":
    main(sys.argv[1])
