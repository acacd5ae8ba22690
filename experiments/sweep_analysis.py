"""The per-point `shamn analyze` numbers of a sweep (each point's analysis.json),
as markdown tables of mean +- sample std over the seeds, one row per value of
the first axis. What experiments/sweep_sparsity.md quotes.
Usage: sweep_analysis.py SWEEP_DIR"""
import json
import math
import os
import statistics
import sys
from collections import defaultdict


def point_axis(name):
    # "sparse.sparsity=0.75,seed=2" -> "0.75"
    return name.split(",")[0].split("=")[1]


def cell(values, digits):
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "-"
    mean = statistics.mean(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def per_point(a):
    moe, mem, thirds = a["moe"], a["memory"], {t["name"]: t for t in a["loss_by_frequency"]}
    m = mem[0] if mem else None
    return {
        "loss": a["loss"],
        "entropy_ratio": statistics.mean(x["entropy"] / x["max_entropy"] for x in moe),
        "entropy_ratio_min": min(x["entropy"] / x["max_entropy"] for x in moe),
        "busiest": max(x["busiest_share"] for x in moe),
        "never": sum(x["never_chosen"] for x in moe),
        "gate1": statistics.mean(x["mean_gate_first"] for x in moe),
        "group_max": max(max(x["group_share"]) for x in moe),
        "slots_read": 100 * m["slots_read_share"] if m else None,
        "top1pct": 100 * m["top1pct_share"] if m else None,
        "mem_entropy_ratio": m["entropy"] / m["max_entropy"] if m else None,
        "margin": m["mean_margin"] if m else None,
        "rare": thirds["rare"]["loss"],
        "middle": thirds["middle"]["loss"],
        "frequent": thirds["frequent"]["loss"],
        "mixer_cv": statistics.mean(b["cv"] for b in a["block_norms"] if b["name"].endswith("mixer.out")),
        "expert_cv": statistics.mean(b["cv"] for b in a["block_norms"] if "experts" in b["name"]),
    }


def main(sweep_dir):
    groups = defaultdict(list)
    for name in sorted(os.listdir(sweep_dir)):
        path = os.path.join(sweep_dir, name, "analysis.json")
        if os.path.isfile(path):
            groups[point_axis(name)].append(per_point(json.load(open(path))))
    if not groups:
        sys.exit(f"{sweep_dir}: no point has an analysis.json (run shamn sweep on it)")
    keys = sorted(groups, key=float)
    tables = [
        ("MoE (mean over the 4 layers unless said)",
         [("expert-load entropy / max", "entropy_ratio", 4), ("lowest layer", "entropy_ratio_min", 4),
          ("busiest expert share (max)", "busiest", 3), ("busiest group share (max)", "group_max", 3),
          ("never chosen (sum)", "never", 1), ("gate of 1st choice", "gate1", 3)]),
        ("memory (16,384 slots, top-16)",
         [("slots read %", "slots_read", 1), ("top 1% of slots take %", "top1pct", 1),
          ("slot-use entropy / max", "mem_entropy_ratio", 3), ("margin 1st - 16th", "margin", 2)]),
        ("loss by target frequency (nats)",
         [("rare third", "rare", 3), ("middle third", "middle", 3), ("frequent third", "frequent", 3),
          ("all", "loss", 3)]),
        ("active-block norms (cv = std / mean, mean over layers)",
         [("mixer.out cv", "mixer_cv", 3), ("experts cv", "expert_cv", 3)]),
    ]
    for title, cols in tables:
        print(f"**{title}**\n")
        print("| sparsity | n | " + " | ".join(c[0] for c in cols) + " |")
        print("| ---: | ---: | " + " | ".join("---:" for _ in cols) + " |")
        for k in keys:
            rows = groups[k]
            print(f"| {k} | {len(rows)} | " + " | ".join(cell([r[c[1]] for r in rows], c[2]) for c in cols) + " |")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
