#!/usr/bin/env python3
"""Scaling model of data-parallel training over N machines (experiments/distributed.md).

A step is its compute, split evenly over the machines (the config's micro-batches
shared by the ranks), plus the gradient sum (with --overlap 0, none of it hidden
behind the backward pass; training overlaps it by default, train.overlap_exchange):

    step(N) = compute / N + exchange(N)
    exchange(N) = 2 (N-1)/N * bytes / bandwidth + 2 log2(N) * calls * latency

The exchange is recursive halving then doubling (train/mpi_communicator.cpp): each
rank sends and receives 2 (N-1)/N of the gradient bytes, in 2 log2(N) rounds per
call, and a step makes `calls` calls (one per gradient bucket, train.bucket_mib:
4 MiB by default, or per larger tensor). `compute` and `bytes` are measured on this machine (the
distributed.md tables); bandwidth is the link's line rate times `--efficiency`
(an assumption, not a measurement: no network here). With --overlap F, the
exchange hides behind the last fraction F of the compute (the backward pass, as
bucketed overlap would do), which is what overlap could win at best.

Usage: distributed_model.py --compute-s 22.0 --bytes 174059520 [--tokens 49152]
       [--calls 13] [--latency-us 50] [--efficiency 0.8] [--overlap 0.0]
"""
import argparse
import math


def exchange_s(n, nbytes, gbit, efficiency, calls, latency_s):
    if n == 1:
        return 0.0
    bandwidth = gbit * 1e9 / 8 * efficiency
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * math.log2(n) * calls * latency_s


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compute-s", type=float, required=True, help="compute seconds per step on one machine")
    p.add_argument("--bytes", type=float, required=True, help="gradient bytes per step (dense)")
    p.add_argument("--tokens", type=float, default=0, help="tokens per step, for tokens/s")
    p.add_argument("--calls", type=int, default=1, help="gradient sums per step")
    p.add_argument("--latency-us", type=float, default=50.0)
    p.add_argument("--efficiency", type=float, default=0.8, help="share of the line rate MPI reaches")
    p.add_argument("--overlap", type=float, default=0.0, help="share of compute the exchange may hide behind")
    a = p.parse_args()
    links = (10, 25, 100)
    head = "| machines | compute/step |" + "".join(f" {g} Gbit/s: step, comm share, efficiency |" for g in links)
    print(head)
    print("|---|---|" + "---|" * len(links))
    for n in (1, 2, 4, 8, 16, 32, 64):
        compute = a.compute_s / n
        cells = []
        for g in links:
            x = exchange_s(n, a.bytes, g, a.efficiency, a.calls, a.latency_us * 1e-6)
            step = compute + max(0.0, x - a.overlap * compute)
            eff = a.compute_s / (n * step)
            cells.append(f" {step:.3f} s, {(step - compute) / step:.0%}, {eff:.0%} |")
        print(f"| {n} | {compute:.3f} s |" + "".join(cells))
    for g in links:
        x_inf = 2 * a.bytes / (g * 1e9 / 8 * a.efficiency)
        # comm equals compute at N = compute / exchange (exchange ~ flat in N)
        print(f"{g} Gbit/s: exchange -> {x_inf:.3f} s per step; it equals the compute at about "
              f"N = {a.compute_s / x_inf:.0f} machines")


if __name__ == "__main__":
    main()
