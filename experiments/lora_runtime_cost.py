#!/usr/bin/env python3
"""The runtime's cost of LoRA adapters, in CPU time: what it costs on a machine
other jobs share, where wall-clock tokens/s move by tens of percent from run to
run but the CPU time of a 1-thread run moves by a few.

Usage: experiments/lora_runtime_cost.py SHAMN WORKDIR [ROUNDS]

WORKDIR is experiments/lora_bench.sh's (base-int8.shq and the adapters
lora{4,8,32,4mq,8mq,32mq}-{int8,f32}.lora, "mq": the dense side only; and
their no-op twins noop*.lora where present). For each variant (no adapter, one adapter,
four mixed) and each shape (decode: 1 and 16 streams; prefill: 1 and 16
streams), `shamn --threads 1 bench` runs once with the work and once with
almost none (one prompt token, one decoded token, one repeat: start-up,
loading, the adapter's packing); the difference is the CPU time of the work.
Variants run interleaved, round by round; the table gives each variant's
median over rounds of its ratio to the bare base in the same round.

The decode shapes feed random tokens drawn up front (`bench --forced-decode`):
every variant decodes the same tokens, so a ratio is the adapter's work alone,
not also the difference between the texts the models generate (which experts
the tokens route to, and how evenly). SAMPLED=1 decodes the sampled tokens
instead, as the tables before stop 73 did.

CPU time counts the page faults of a process's first use of its buffers, and
those follow its allocation history: an adapter's loading frees memory that
the prefill's buffers then reuse, so a bare base's 16-stream prefill paid
~0.02 s more system time than an adapted one's, and adapters looked cheaper
than none. METRIC=rate times the work instead by `bench`'s own figures (the
median over repeats of decode or prefill tokens/s, after its untimed warm-up
run): each ratio is the bare base's rate over the variant's. Pin it
(`taskset -c 0`) on a quiet machine: it is wall-clock time.
"""
import json
import os
import statistics
import subprocess
import sys



def variants(prefix, label):
    """The adapters of one kind: lora* (trained) or noop* (B ~ 1e-30)."""
    def files(*names):
        return [arg for n in names for arg in ("--adapter", f"{prefix}{n}.lora")]
    return {
        f"r8, dense side{label}": files("8mq-int8"),
        f"r32, dense side{label}": files("32mq-int8"),
        f"4 mixed, dense side (r4, r8, r32, r8 f32){label}": files("4mq-int8", "8mq-int8", "32mq-int8", "8mq-f32"),
        f"r8{label}": files("8-int8"),
        f"r32{label}": files("32-int8"),
        f"4 mixed (r4, r8, r32, r8 f32){label}": files("4-int8", "8-int8", "32-int8", "8-f32"),
    }


# The trained adapters, then (when lora_bench.sh made them) the no-op ones:
# the same ranks and targets after one step at a learning rate of 1e-30, so
# the model's activations, and so the work of the base around the adapters
# (which experts and memory slots the tokens reach), are the base's own.
VARIANTS = {"none": [], **variants("lora", ""), **variants("noop", ", no-op")}
# (name, bench arguments): the decode shapes decode many tokens after a short
# prompt, the prefill shapes the reverse.
SHAPES = [
    ("decode, 1 stream", ["--prompt-tokens", "16", "--decode-tokens", "1024", "--repeats", "3"]),
    ("decode, 16 streams", ["--prompt-tokens", "16", "--decode-tokens", "256", "--repeats", "3",
                            "--streams", "16"]),
    ("prefill 512, 1 stream", ["--prompt-tokens", "512", "--decode-tokens", "1", "--repeats", "9"]),
    ("prefill 128, 16 streams", ["--prompt-tokens", "128", "--decode-tokens", "1", "--repeats", "5",
                                 "--streams", "16"]),
]
IDLE = ["--prompt-tokens", "1", "--decode-tokens", "1", "--repeats", "1"]
if os.environ.get("METRIC") == "rate":
    # bench's median over its repeats: on a VM whose vCPU loses half of some
    # 25 ms windows, a 13 ms prefill is fast or twice as slow at random, and
    # the median of a few repeats lands in either mode; of 40, in the fast one.
    def with_repeats(args, n):
        i = args.index("--repeats")
        return args[:i + 1] + [str(n)] + args[i + 2:]
    SHAPES = [(name, with_repeats(args, 40) if name.startswith("prefill") else args) for name, args in SHAPES]
if os.environ.get("SAMPLED") != "1":
    SHAPES = [(name, args + ["--forced-decode"]) if name.startswith("decode") else (name, args)
              for name, args in SHAPES]


def bench_rate(cmd, cwd, key):
    """bench --json's figure `key` (tokens/s)."""
    out = subprocess.run(cmd + ["--json"], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)[key]


def cpu_seconds(cmd, cwd):
    """User + system CPU time of one run of cmd (output discarded)."""
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=null, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode()
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}\n{err}")
    return usage.ru_utime + usage.ru_stime


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    shamn, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) == 4 else 5
    global VARIANTS
    if not os.path.exists(os.path.join(work, "noop8-int8.lora")):
        VARIANTS = {v: args for v, args in VARIANTS.items() if not v.endswith("no-op")}
    ratios = {(s, v): [] for s, _ in SHAPES for v in VARIANTS}
    work_s = {(s, v): [] for s, _ in SHAPES for v in VARIANTS}
    for r in range(rounds):
        for shape, args in SHAPES:
            base = None
            for variant, extra in VARIANTS.items():
                streams = args[args.index("--streams") + 1:][:1] if "--streams" in args else []
                cmd = [shamn, "--threads", "1", "bench", "base-int8.shq"] + extra
                if os.environ.get("METRIC") == "rate":  # seconds a token, by bench's own clock
                    key = "decode_tok_s" if shape.startswith("decode") else "prefill_tok_s"
                    t = 1.0 / bench_rate(cmd + args, work, key)
                else:
                    busy = cpu_seconds(cmd + args, work)
                    idle = cpu_seconds(cmd + IDLE + (["--streams"] + streams if streams else []), work)
                    t = busy - idle
                work_s[(shape, variant)].append(t)
                if variant == "none":
                    base = t
                ratios[(shape, variant)].append(t / base)
            print(f"round {r + 1}/{rounds}: {shape} done", file=sys.stderr)
    print("| adapter (int8 base, 1 thread) | " + " | ".join(s for s, _ in SHAPES) + " |")
    print("| --- |" + " ---: |" * len(SHAPES))
    for variant in VARIANTS:
        cells = []
        for shape, _ in SHAPES:
            rs = ratios[(shape, variant)]
            if variant == "none":
                w = statistics.median(work_s[(shape, variant)])
                cells.append(f"{1e6 * w:.2f} us a token" if os.environ.get("METRIC") == "rate" else f"{w:.3f} CPU s")
            else:
                cells.append(f"{statistics.median(rs):.3f} ({min(rs):.2f}-{max(rs):.2f})")
        print(f"| {variant} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
