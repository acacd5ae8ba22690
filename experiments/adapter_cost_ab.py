#!/usr/bin/env python3
"""Two shamn binaries' CPU cost of LoRA adapters, side by side (the figures of
experiments/lora.md, "An f32 adapter's B in registers").

Usage: experiments/adapter_cost_ab.py OLD NEW MODEL.shq F32.lora INT8.lora [ROUNDS]

For each shape (decode 1 and 16 streams, a 512-token prefill), binary and
adapter (none, the f32 one, the int8 one), `shamn --threads 1 bench` runs
once with the work and once with almost none (one prompt token, one decoded
token, one repeat); the difference is the work's CPU time, which moves by a
few percent on a shared machine where tokens/s move by tens. Everything runs
in turn, round after round; each line gives the median over rounds of the
per-round ratio new / old, and of each binary's ratio to its bare base.
"""
import resource
import statistics
import subprocess
import sys

SHAPES = {
    "decode, 1 stream": ["--prompt-tokens", "16", "--decode-tokens", "512", "--repeats", "2"],
    "decode, 16 streams": ["--prompt-tokens", "16", "--decode-tokens", "128", "--repeats", "3", "--streams", "16"],
    "prefill 512": ["--prompt-tokens", "512", "--decode-tokens", "1", "--repeats", "5"],
}
IDLE = ["--prompt-tokens", "1", "--decode-tokens", "1", "--repeats", "1"]


def cpu_seconds(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}): {run.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    if len(sys.argv) not in (6, 7):
        sys.exit(__doc__)
    old, new, model, f32, int8 = sys.argv[1:6]
    rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 15
    bins = {"old": old, "new": new}
    adapters = {"none": [], "f32": ["--adapter", f32], "int8": ["--adapter", int8]}
    work = {}
    for _ in range(rounds):
        for shape, args in SHAPES.items():
            idle = IDLE + (["--streams", "16"] if "--streams" in args else [])
            for b, path in bins.items():
                for a, extra in adapters.items():
                    cmd = [path, "--threads", "1", "bench", model] + extra
                    work.setdefault((shape, b, a), []).append(cpu_seconds(cmd + args) - cpu_seconds(cmd + idle))

    def med(xs, ys):
        r = [x / y for x, y in zip(xs, ys)]
        return f"{statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f})"

    print("| work | adapter | new / old | old / bare | new / bare |")
    print("| --- | --- | ---: | ---: | ---: |")
    for shape in SHAPES:
        for a in adapters:
            o, n = work[(shape, "old", a)], work[(shape, "new", a)]
            print(f"| {shape} | {a} | {med(n, o)} | {med(o, work[(shape, 'old', 'none')])} | "
                  f"{med(n, work[(shape, 'new', 'none')])} |")


if __name__ == "__main__":
    main()
