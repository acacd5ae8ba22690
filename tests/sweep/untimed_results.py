"""Prints a sweep's results.csv without its timing columns (tokens/s, peak RSS,
wall time, decode tok/s), so two sweeps of the same points compare equal.
Usage: untimed_results.py RESULTS_CSV"""
import csv
import sys

TIMING = {"train_tokens_per_s", "peak_rss_mib", "train_wall_s", "int8_decode_tok_s"}
rows = list(csv.reader(open(sys.argv[1])))
missing = TIMING - set(rows[0])
if missing:
    sys.exit(f"{sys.argv[1]}: no column {', '.join(sorted(missing))}: update {sys.argv[0]}")
keep = [i for i, name in enumerate(rows[0]) if name not in TIMING]
for row in rows:
    print(",".join(row[i] for i in keep))
