#!/usr/bin/env bash
# `shamn sweep` end to end on configs/ablations/tiny.toml (2 sparsities x 2
# seeds on a synthetic corpus): results.csv has a row per run and a column per
# axis and metric, summary.md a row per sparsity, the plots are real PNG/SVG
# files (when gnuplot is installed), each point has its analysis (the headline
# numbers in the CSV, analysis.json, its plots); a rerun skips every finished
# point without touching it, and fills in the analysis of points finished
# without one, without retraining; two SIGHUPs stop a sweep as one (never the
# second, killing signal); a sweep stopped with SIGINT mid-run resumes on rerun and gives the
# same numbers as one that never stopped; a changed config in an existing sweep
# directory, or a second sweep running in it, is refused; a failing point is
# reported with its error while the others finish.
# Usage: cli_sweep.sh SHAMN_BINARY SWEEP_FILE WORKDIR
set -euo pipefail
shamn=$1 sweep=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$shamn" synthetic --out runs/sweep_tiny_data --vocab 64 --successors 4 --tokens 200000 > /dev/null

fail() { echo "FAIL: $*"; exit 1; }
"$shamn" sweep "$sweep" > first.txt || { cat first.txt; fail "the sweep failed"; }
out=runs/sweep_tiny
grep -q "4 points (1 axes x 2 seeds)" first.txt || { cat first.txt; fail "plan line"; }
[ "$(wc -l < $out/results.csv)" -eq 5 ] || fail "results.csv should have a header and 4 rows"
/usr/bin/python3 - "$out" <<'PY'
import csv, json, math, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
metrics = ["val_loss", "val_ppl", "train_tokens_per_s", "stored_params", "touched_params_per_token",
           "train_flops_per_token", "peak_rss_mib", "train_wall_s", "eval_f32_ppl", "int8_ppl",
           "int8_decode_tok_s", "int8_file_bytes", "expert_entropy_ratio", "memory_slots_read",
           "rare_loss", "frequent_loss"]
assert list(rows[0].keys()) == ["point", "model.sparse.sparsity", "train.seed"] + metrics, rows[0].keys()
assert sorted((r["model.sparse.sparsity"], r["train.seed"]) for r in rows) == \
    [("0.0", "1"), ("0.0", "2"), ("0.5", "1"), ("0.5", "2")], rows
for r in rows:
    v = {m: float(r[m]) for m in metrics}
    assert all(math.isfinite(x) and x > 0 for x in v.values()), r
    assert abs(v["val_ppl"] - math.exp(v["val_loss"])) < 1e-3 * v["val_ppl"], r
    # The chain has 4 successors per token: a trained model is far below uniform (64).
    assert 3.5 < v["val_ppl"] < 40, r
    assert abs(v["int8_ppl"] / v["eval_f32_ppl"] - 1) < 0.05, r
    assert v["touched_params_per_token"] <= v["stored_params"], r
    assert v["expert_entropy_ratio"] <= 1 and v["memory_slots_read"] <= 1, r
    # The analysis is of the final checkpoint on the val windows eval reads.
    a = json.load(open(f"{out}/{r['point']}/analysis.json"))
    assert a["windows"] == 8 and len(a["moe"]) == 2, a
    assert v["rare_loss"] == float(f'{a["loss_by_frequency"][0]["loss"]:.6g}'), (r, a["loss_by_frequency"])
by = {(r["model.sparse.sparsity"], r["train.seed"]): r for r in rows}
# Sparser blocks: fewer stored parameters and FLOPs; seeds do not change sizes.
assert float(by[("0.5", "1")]["stored_params"]) < float(by[("0.0", "1")]["stored_params"])
assert float(by[("0.5", "1")]["train_flops_per_token"]) < float(by[("0.0", "1")]["train_flops_per_token"])
assert by[("0.0", "1")]["stored_params"] == by[("0.0", "2")]["stored_params"]
assert by[("0.0", "1")]["val_loss"] != by[("0.0", "2")]["val_loss"], "seeds should differ"
summary = open(f"{out}/summary.md").read()
table = [l for l in summary.splitlines() if l.startswith("| 0.")]
assert len(table) == 2 and all(l.split("|")[2].strip() == "2" for l in table), summary
mean = (float(by[("0.0", "1")]["val_ppl"]) + float(by[("0.0", "2")]["val_ppl"])) / 2
assert table[0].split("|")[4].strip().startswith(f"{mean:.6g}"[:5]), (table[0], mean)
PY
if command -v gnuplot > /dev/null; then
  for p in val_ppl tokens_per_s ppl_vs_params f32_vs_int8 loss_by_frequency sparse_use; do
    [ "$(head -c 4 $out/plots/$p.png | od -An -tx1 | tr -d ' \n')" = "89504e47" ] || fail "$p.png is not a PNG"
    grep -q "<svg" $out/plots/$p.svg || fail "$p.svg is not an SVG"
  done
  for p in expert_load memory_slots; do
    [ "$(head -c 4 "$out/sparse.sparsity=0.5,seed=2/analysis_plots/$p.png" | od -An -tx1 | tr -d ' \n')" = "89504e47" ] ||
      fail "analysis plot $p.png is not a PNG"
  done
  grep -q "sparse.sparsity=0.5,seed=2: expert load" "$out/sparse.sparsity=0.5,seed=2/analysis_plots/expert_load.svg" ||
    fail "analysis plots are not headed by their point"
else
  grep -q "warning: gnuplot is not installed" first.txt || fail "no gnuplot warning"
fi

# A rerun skips every finished point and leaves its files alone.
stamp() { find $out -path '*/run' -prune -o -name result.json -printf '%p %T@\n' | sort; }
stamp > before.txt
"$shamn" sweep "$sweep" > second.txt
stamp > after.txt
cmp before.txt after.txt || fail "a rerun touched finished points"
grep -q "4 finished (skipped), 0 to analyse, 0 to resume, 0 new" second.txt || { cat second.txt; fail "rerun plan"; }
[ "$(grep -c '^  skipped ' second.txt)" -eq 4 ] || fail "each finished point should say skipped"

# Plots gnuplot cannot write whole (a 16 KiB file size limit, SIGXFSZ ignored:
# gnuplot's writes fail as on a full disk and it still exits 0): a warning, the
# earlier pictures as they were, no staging directory left.
if command -v gnuplot > /dev/null; then
  cp -r $out/plots plots_before
  (ulimit -f 16; trap '' XFSZ; "$shamn" sweep "$sweep") > torn.txt 2>&1 || { cat torn.txt; fail "the torn-plot rerun failed"; }
  grep -q "^warning: plot .*could not write it whole" torn.txt || { cat torn.txt; fail "no warning for torn plots"; }
  diff -r plots_before $out/plots || fail "a torn plot replaced an earlier picture"
  ! ls -A $out | grep -q 'tmp' || fail "the torn plots left $(ls -A $out | grep tmp)"
  # gnuplot failing part way (here: after drawing every picture, then exiting 1):
  # the pictures it drew whole are published all the same, and the warning names
  # plots.gnuplot, the script the user can rerun.
  mkdir -p failing_gnuplot
  printf '#!/bin/sh\n%s "$@"\necho "\\"$1\\" line 1: a failure after the pictures"\nexit 1\n' \
    "$(command -v gnuplot)" > failing_gnuplot/gnuplot
  chmod +x failing_gnuplot/gnuplot
  rm $out/plots/*
  PATH=$PWD/failing_gnuplot:$PATH "$shamn" sweep "$sweep" > failing.txt 2>&1 || { cat failing.txt; fail "the rerun failed"; }
  grep -qF "warning: gnuplot failed: \"$out/plots.gnuplot\" line 1: a failure after the pictures" failing.txt ||
    { cat failing.txt; fail "the warning does not name plots.gnuplot's line"; }
  diff -r plots_before $out/plots || fail "the pictures drawn before gnuplot failed were not published"
fi

# Points that finished before sweeps ran the analysis (result.json without its
# numbers, no analysis.json) get it on a rerun, with the same numbers, and
# nothing is retrained.
cp $out/results.csv analysed.csv
for d in $out/sparse.sparsity=0.0,seed=1 $out/sparse.sparsity=0.5,seed=2; do
  /usr/bin/python3 - "$d/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for m in ["expert_entropy_ratio", "memory_slots_read", "rare_loss", "frequent_loss"]:
    del r["metrics"][m]
json.dump(r, open(sys.argv[1], "w"), indent=2)
PY
  rm -r "$d/analysis.json" "$d/analysis_plots"
done
ls -l --time-style=+%s.%N $out/*/run/*.h5 > ckpts_before.txt
"$shamn" sweep "$sweep" > third.txt || { cat third.txt; fail "the analysing rerun failed"; }
grep -q "2 finished (skipped), 2 to analyse, 0 to resume, 0 new" third.txt || { cat third.txt; fail "analyse plan"; }
[ "$(grep -c '^  analysing (no retraining) ' third.txt)" -eq 2 ] || { cat third.txt; fail "analysing lines"; }
ls -l --time-style=+%s.%N $out/*/run/*.h5 > ckpts_after.txt
cmp ckpts_before.txt ckpts_after.txt || fail "the analysing rerun touched checkpoints"
cmp analysed.csv $out/results.csv || { diff analysed.csv $out/results.csv; fail "filled-in analysis differs"; }
[ -f "$out/sparse.sparsity=0.5,seed=2/analysis.json" ] || fail "no analysis.json after the rerun"

# A point whose training finished outside any sweep's child (a killed sweep's
# trainer that went on alone) has no measured peak RSS: null, not 0, and the
# summary's mean is over the seeds that have it.
d="$out/sparse.sparsity=0.0,seed=2"
rm "$d/result.json" "$d/train_peak_rss_bytes"
"$shamn" sweep "$sweep" > fourth.txt || { cat fourth.txt; fail "the rerun without a peak RSS failed"; }
/usr/bin/python3 - "$d/result.json" "$out/summary.md" <<'PY'
import json, sys
assert json.load(open(sys.argv[1]))["metrics"]["peak_rss_mib"] is None, "peak_rss_mib is not null"
row = [l for l in open(sys.argv[2]) if l.startswith("| 0.0 |")][0]
assert " (n 1) |" in row, row
PY

# Another config in the same directory is refused, naming the file, before any
# point is called finished; by a dry run too.
for dry in "" --dry-run; do
  status=0
  "$shamn" sweep "$sweep" --set train.max_steps=31 $dry > changed.out 2> changed.err || status=$?
  [ "$status" -eq 1 ] && grep -q "holds a different config" changed.err || { cat changed.err; fail "changed config $dry"; }
  ! grep -q "finished" changed.out || { cat changed.out; fail "changed config $dry: points called finished"; }
done

# SIGINT while the first point trains; the rerun resumes it. No timing decides
# where the signal lands: the trainer stops itself (SIGSTOP, a named fault point)
# right after its first checkpoint is in place, the sweep forwards SIGINT to it
# while it is stopped, and only once that signal is pending does it continue.
# Job control (set -m): a script's background job would otherwise ignore SIGINT,
# which the sweep leaves ignored; SIGHUP is ignored here on purpose, as nohup does.
set -m
(trap '' HUP; SHAMN_FAULT=checkpoint.dirsync:1:stall exec "$shamn" sweep "$sweep" --out-dir runs/stopped --jobs 1) \
  > stopped.txt 2> stopped.err &
pid=$!
set +m
child=
# Should a check below fail, the sweep and its stopped trainer must not outlive the test.
trap 'kill -KILL $pid $child 2> /dev/null || true' EXIT
point=runs/stopped/sparse.sparsity=0.0,seed=1
child_state() { [ -n "$child" ] && cut -d' ' -f3 "/proc/$child/stat" 2> /dev/null; }
child_of() {  # the process whose parent is $1 (from /proc/PID/stat: pid (comm) state ppid ...)
  local stat p comm state ppid rest
  for stat in /proc/[0-9]*/stat; do
    read -r p comm state ppid rest < "$stat" 2> /dev/null || continue
    [ "$ppid" = "$1" ] && echo "$p" && return
  done
  return 0  # none (yet)
}
# Sets child to the sweep's trainer once that has stopped itself (SIGSTOP at the
# named fault point), polling its state; fails with the sweep's output otherwise.
wait_for_stopped_trainer() {  # OUTPUT ERRORS WHICH_RUN
  for _ in $(seq 1 2400); do  # up to 2 minutes for the first 25 steps
    child=$(child_of $pid)
    [ "$(child_state)" = T ] && return
    kill -0 $pid 2> /dev/null || break
    sleep 0.05
  done
  cat "$1" "$2"
  fail "the trainer did not stop at its first checkpoint ($3)"
}
wait_for_stopped_trainer stopped.txt stopped.err "SIGINT run"
[ -e "$point/run/ckpt_00000025.h5" ] || fail "the trainer stopped before its step-25 checkpoint"
# A second sweep into the same directory while the first runs is refused.
status=0
"$shamn" sweep "$sweep" --out-dir runs/stopped > /dev/null 2> locked.err || status=$?
[ "$status" -eq 1 ] && grep -q "another shamn sweep is running" locked.err || { cat locked.err; fail "no lock"; }
# nohup's SIGHUP stays ignored (the sweep outlives an ssh session); SIGINT is caught.
mask() { echo $((0x$(sed -n "s/^$1:\t//p" "/proc/$pid/status"))); }
[ $(($(mask SigIgn) & 1)) = 1 ] && [ $(($(mask SigCgt) & 1)) = 0 ] || fail "the sweep caught the SIGHUP nohup ignores"
[ $(($(mask SigCgt) & 2)) = 2 ] || fail "the sweep does not catch SIGINT"
kill -INT $pid
sigint_pending() { [ $((0x$(sed -n 's/^ShdPnd:\t//p' "/proc/$child/status") & 2)) != 0 ]; }
for _ in $(seq 1 600); do sigint_pending && break; sleep 0.05; done
sigint_pending || fail "the sweep did not forward SIGINT to its trainer"
kill -CONT "$child"
status=0
wait $pid || status=$?
trap - EXIT  # both have ended: their pids may be reused
[ "$status" -eq 1 ] || { cat stopped.txt stopped.err; fail "a stopped sweep exits 1, got $status"; }
grep -q "run the same command again" stopped.err || { cat stopped.err; fail "stop message"; }
[ ! -e "$point/result.json" ] || fail "the stopped point was marked finished"
"$shamn" sweep "$sweep" --out-dir runs/stopped --jobs 1 > resumed.txt || { cat resumed.txt; fail "resume"; }
grep -q "resuming sparse.sparsity=0.0,seed=1" resumed.txt || { cat resumed.txt; fail "no resume"; }
# Resumed training is exact: every untimed column as in the sweep that never stopped.
/usr/bin/python3 "$here/untimed_results.py" $out/results.csv > a.csv
/usr/bin/python3 "$here/untimed_results.py" runs/stopped/results.csv > b.csv
cmp a.csv b.csv || { diff a.csv b.csv; fail "resumed results differ"; }

# Two SIGHUPs, as a closed terminal sends them (the shell's, then the kernel's):
# one stop request, never the second signal that kills the trainer before its
# checkpoint and ends the sweep with 130. Each SIGHUP is seen handled (no longer
# pending) before the next step, so the outcome, not timing, tells them apart.
set -m
(SHAMN_FAULT=checkpoint.dirsync:1:stall exec "$shamn" sweep "$sweep" --out-dir runs/hup --jobs 1) \
  > hup.txt 2> hup.err &
pid=$!
set +m
child=
trap 'kill -KILL $pid $child 2> /dev/null || true' EXIT
wait_for_stopped_trainer hup.txt hup.err "SIGHUP run"
hup_pending() { [ $(((0x$(sed -n 's/^SigPnd:\t//p' "/proc/$pid/status") | 0x$(sed -n 's/^ShdPnd:\t//p' "/proc/$pid/status")) & 1)) != 0 ]; }
kill -HUP $pid
for _ in $(seq 1 600); do sigint_pending && break; sleep 0.05; done
sigint_pending || fail "the sweep did not forward the first SIGHUP to its trainer as SIGINT"
kill -HUP $pid
for _ in $(seq 1 600); do hup_pending || break; sleep 0.05; done
hup_pending && fail "the second SIGHUP was never handled"
kill -CONT "$child"
status=0
wait $pid || status=$?
trap - EXIT
[ "$status" -eq 1 ] || { cat hup.txt hup.err; fail "a sweep stopped by two SIGHUPs exits 1 (its trainer checkpointed), got $status"; }
grep -q "run the same command again" hup.err || { cat hup.err; fail "no stop message after two SIGHUPs"; }
[ -e "runs/hup/sparse.sparsity=0.0,seed=1/run/ckpt_00000025.h5" ] || fail "the SIGHUP-stopped trainer lost its checkpoint"

# A point that fails (tokens past a too-small vocabulary) is reported with the
# trainer's message; the others still run, and the sweep exits 1.
status=0
"$shamn" sweep "$sweep" --out-dir runs/bad --set model.vocab_size=32 --set model.embed.buckets=16 \
  > bad.txt 2> bad.err || status=$?
[ "$status" -eq 1 ] || fail "a failed point should make the sweep exit 1"
[ "$(grep -c 'FAILED, train failed (exit status 1: error: token file' bad.txt)" -eq 4 ] || { cat bad.txt; fail "failure lines"; }
grep -q "4 points failed" bad.err || { cat bad.err; fail "failure summary"; }
[ "$(wc -l < runs/bad/results.csv)" -eq 1 ] || fail "no rows for failed points"
echo "cli_sweep: ok"
