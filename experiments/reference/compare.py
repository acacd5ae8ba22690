#!/usr/bin/python3
"""Compare every dataset under /model/ of two HDF5 files (checkpoints or gradient files).

    /usr/bin/python3 experiments/reference/compare.py A.h5 B.h5 [--rtol 1e-3] [--atol 1e-8]

Prints one row per tensor (name, shape, max abs error, max rel error, verdict)
and exits 1 if the two files hold different names, a shape differs, or any
tensor fails the tolerance; 0 otherwise.

Tolerance rule (per tensor, symmetric in A and B):

    scale   = max(max|A|, max|B|)              over the whole tensor
    abs_err = max |A - B|                       over the whole tensor
    rel_err = abs_err / scale                   (0 when scale is 0)
    pass   <=> abs_err <= atol + rtol * scale

The error is measured against the tensor's largest magnitude, not element by
element. Gradients are mostly zero or tiny in places (memory values and keys
touched by few slots, experts that saw few tokens, embedding rows of absent
tokens): an elementwise relative error would blow up on float32 round-off in
entries that are 1e-6 of the tensor's scale and carry no weight, while a
tensor-scaled error still catches a wrong row, a missing contribution or a
sign error wherever it sits. atol only matters for tensors that are zero or
nearly zero throughout (an expert no token reached): two all-zero gradients
agree, a stray value above atol does not. Integer datasets (bucket_index,
col_index) must match exactly.
"""

import argparse
import sys

import h5py
import numpy as np


def read_model(path):
    out = {}
    with h5py.File(path, "r") as f:
        if "model" not in f:
            raise SystemExit(f"compare.py: error: {path} has no /model group")

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name.replace("/", ".")] = obj[()]
        f["model"].visititems(visit)
    return out


def compare_tensor(a, b, rtol, atol):
    """Returns (abs_err, rel_err, ok) under the rule in the module docstring."""
    if a.shape != b.shape:
        return float("nan"), float("nan"), False
    if not (np.issubdtype(a.dtype, np.floating) and np.issubdtype(b.dtype, np.floating)):
        diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
        abs_err = float(diff.max()) if diff.size else 0.0
        scale = float(max(np.abs(a).max(), np.abs(b).max())) if a.size else 0.0
        return abs_err, (abs_err / scale if scale else 0.0), abs_err == 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a.size == 0:
        return 0.0, 0.0, True
    if not (np.isfinite(a64).all() and np.isfinite(b64).all()):
        return float("nan"), float("nan"), False
    abs_err = float(np.abs(a64 - b64).max())
    scale = float(max(np.abs(a64).max(), np.abs(b64).max()))
    rel_err = abs_err / scale if scale > 0 else 0.0
    return abs_err, rel_err, abs_err <= atol + rtol * scale


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative to the tensor's max |value|")
    parser.add_argument("--atol", type=float, default=1e-8)
    parser.add_argument("--failures-only", action="store_true", help="print only failing rows")
    args = parser.parse_args(argv)

    A, B = read_model(args.a), read_model(args.b)
    names = sorted(set(A) | set(B))
    width = max([len(n) for n in names] + [4])
    print(f"{'name':<{width}}  {'shape':<18} {'max_abs_err':>12} {'max_rel_err':>12}  result")
    failures = 0
    for name in names:
        if name not in A or name not in B:
            where = args.b if name not in B else args.a
            shape = (A.get(name) if name in A else B[name]).shape
            print(f"{name:<{width}}  {str(list(shape)):<18} {'-':>12} {'-':>12}  FAIL (missing in {where})")
            failures += 1
            continue
        a, b = A[name], B[name]
        abs_err, rel_err, ok = compare_tensor(a, b, args.rtol, args.atol)
        shape = str(list(a.shape)) if a.shape == b.shape else f"{list(a.shape)}!={list(b.shape)}"
        failures += not ok
        if ok and args.failures_only:
            continue
        print(f"{name:<{width}}  {shape:<18} {abs_err:>12.3e} {rel_err:>12.3e}  {'ok' if ok else 'FAIL'}")
    print(f"{len(names) - failures}/{len(names)} tensors within atol {args.atol:g} + rtol {args.rtol:g} * max|x|")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
