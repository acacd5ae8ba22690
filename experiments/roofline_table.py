#!/usr/bin/env python3
"""The markdown tables of experiments/roofline.md from `--profile` output.

  roofline_table.py RUN.txt STEPS [MIN_SHARE]     ops of RUN over MIN_SHARE % of the step (default 1),
                                                  per step, then the step and its passes
  roofline_table.py --compare ONE.txt TWO.txt STEPS [MIN_SHARE] [THREADS]
                                                  ms per step of each op in two runs (1 and 2 threads)
                                                  and the speed-up of the second; STEPS is one count
                                                  for both or ONE_STEPS,TWO_STEPS. With THREADS (the
                                                  second run's; the first ran on one), each op's ms
                                                  above THREADS-fold scaling and the step's serial
                                                  fraction by Amdahl's law

STEPS is the number of steps the profile holds, or `auto` to read it from the
profile's own table (the train_step row's calls): the warm-up steps
(`--profile-warmup`, 1 by default) are left out of it, so a run of N steps
holds N - 1. A count the profile contradicts is refused, naming the right one.

Rows are the roofline table's (name, category, total ms, GFLOP, MB, bound ms,
x bound, % step); layers, phases and the step are left out of the op rows.
"""
import re
import sys

NOT_OPS = re.compile(r"^(layers\.|head$|embed$|final_norm$|forward$|backward$|evaluate$|train_step$)")


def rows(path):
    lines = open(path).read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("name ") and "x bound" in line)
    level = " in " in lines[start]  # the column of the level holding most bytes
    out = {}
    for line in lines[start + 1:]:
        if line.startswith("step:"):
            break
        p = line.split()
        if not level:
            p.insert(5, "")
        out[(p[0], p[1])] = dict(ms=float(p[2]), gflop=float(p[3]), mb=float(p[4]), level=p[5],
                                 bound=float(p[6]), ratio=p[7], share=float(p[8]))
    return out


def profiled_steps(path, given):
    """The steps the profile of `path` holds: its train_step row's calls, checked against `given`."""
    lines = open(path).read().split("\n")
    header = next((i for i, line in enumerate(lines) if line.startswith("name ") and " calls " in line), None)
    calls = None
    if header is not None:
        for line in lines[header + 1:]:
            p = line.split()
            if len(p) > 2 and p[0] == "train_step" and p[1] == "step":
                calls = int(p[2])
                break
    if given == "auto":
        if calls is None:
            sys.exit(f"{path}: no train_step row with its calls; give STEPS")
        return calls
    if calls is not None and int(given) != calls:
        sys.exit(f"{path} profiles {calls} steps (warm-up steps left out), not {given}: give {calls} or auto")
    return int(given)


def table(path, steps, min_share):
    steps = profiled_steps(path, steps)
    r = rows(path)
    print("| op | pass | ms/step | GFLOP/step | MB/step | in | bound ms/step | x bound | % step |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    ops = [(k, v) for k, v in r.items() if not NOT_OPS.match(k[0]) and v["share"] >= min_share]
    phases = [(k, v) for k, v in r.items() if k[0] in ("train_step", "backward", "forward")]
    for (name, cat), v in ops:
        print(f"| {name} | {cat} | {v['ms'] / steps:.1f} | {v['gflop'] / steps:.2f} | {v['mb'] / steps:.0f} "
              f"| {v['level']} | {v['bound'] / steps:.2f} | {v['ratio']} | {v['share']} |")
    for (name, cat), v in phases:
        print(f"| **{name}** | {cat} | {v['ms'] / steps:.1f} | {v['gflop'] / steps:.2f} | {v['mb'] / steps:.0f} "
              f"| {v['level']} | {v['bound'] / steps:.2f} | {v['ratio']} | {v['share']} |")


def compare(one, two, steps, min_share, threads=None):
    a, b = rows(one), rows(two)
    given_a, given_b = steps.split(",") if "," in steps else (steps, steps)
    steps_a, steps_b = profiled_steps(one, given_a), profiled_steps(two, given_b)
    over = f" | ms over {threads}x" if threads else ""
    print(f"| op | pass | ms/step, run 1 | ms/step, run 2 | speed-up | x bound, run 2{over} |")
    print("| --- | --- | ---: | ---: | ---: | ---:" + (" | ---: |" if threads else " |"))
    keys = [k for k, v in a.items() if k in b and (not NOT_OPS.match(k[0]) or k[0] == "train_step")
            and v["share"] >= min_share]
    for name, cat in keys:
        x, y = a[(name, cat)]["ms"] / steps_a, b[(name, cat)]["ms"] / steps_b
        extra = f" | {y - x / threads:.1f}" if threads else ""
        print(f"| {name} | {cat} | {x:.1f} | {y:.1f} | {x / y:.2f}x | {b[(name, cat)]['ratio']}{extra} |")
    if threads and threads > 1 and ("train_step", "step") in a and ("train_step", "step") in b:
        # Amdahl: T_n = T_1 * (f + (1 - f) / n), so f = (T_n / T_1 - 1 / n) / (1 - 1 / n).
        x, y = a[("train_step", "step")]["ms"] / steps_a, b[("train_step", "step")]["ms"] / steps_b
        f = (y / x - 1 / threads) / (1 - 1 / threads)
        print(f"\nstep speed-up {x / y:.2f}x on {threads} threads: serial fraction {100 * f:.1f}% "
              f"(Amdahl); at 16 threads that fraction alone would allow {1 / (f + (1 - f) / 16):.1f}x")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--compare":
        compare(args[1], args[2], args[3], float(args[4]) if len(args) > 4 else 1.0,
                int(args[5]) if len(args) > 5 else None)
    elif len(args) >= 2:
        table(args[0], args[1], float(args[2]) if len(args) > 2 else 1.0)
    else:
        sys.exit(__doc__)
