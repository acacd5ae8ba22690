#!/usr/bin/env bash
# Crashes and failed writes at named points (SHAMN_FAULT, core/fault.h), never at
# random moments, so the outcome does not depend on timing or load. For each
# site of a training run: the process dies by SIGKILL there (or the write fails
# with ENOSPC/EIO); every checkpoint left loads; --resume then ends with bitwise
# the weights, AdamW moments, state and metrics of a run that never stopped; no
# temporary file is left. A failed write stops the run with one clear error that
# names the last good checkpoint, which stays intact. Then the same for the
# other atomic writers: prepare's token files, the tokenizer, export's .shq (an
# existing file survives a crash while it is being replaced) and a sweep point's
# result.json.
# Usage: fault_injection.sh SHAMN_BINARY CONFIG SWEEP_FILE WORKDIR
set -euo pipefail
shamn=$(realpath "$1") config=$(realpath "$2") sweep=$(realpath "$3") work=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$shamn" synthetic --out "$work/data" --vocab 64 --successors 4 --tokens 60000 > /dev/null

# Six steps, a checkpoint every second step, evaluations at 3 and 6 (best.h5 moves).
sets=(--set "data.train_path=\"$work/data/train.bin\"" --set "data.val_path=\"$work/data/val.bin\""
      --set model.vocab_size=64 --set model.embed.buckets=32 --set train.max_steps=6
      --set train.checkpoint_every=2 --set train.keep_last=2 --set train.eval_every=3
      --set train.eval_batches=2 --set optim.warmup_steps=2 --set 'log.progress="never"')
train_into() {  # train_into DIR [--set ...]: a fresh run
  local dir=$1
  shift
  "$shamn" --threads 1 train "$config" "${sets[@]}" --set "train.out_dir=\"$dir\"" "$@"
}
digest() { "$shamn" info "$1" --tensors | sed -n '/^# tensors/,$p'; }
metrics() { sed -E 's/,"(tokens_per_s|elapsed_s)":[^,}]*//g' "$1"; }
no_temp_files() { ! ls -A "$1" | grep -q '\.tmp\.' || fail "$2: temporary files left in $1: $(ls -A "$1")"; }
# signal_at_stalls FAULTS "SIG..." -- CMD...: runs CMD with SHAMN_FAULT=FAULTS (stall
# actions), sends the n-th signal once it has stopped at the n-th stall and lets it
# go on; returns its status, and leaves its thread count at the last stall in
# $stall_threads. Job control, so the background job does not ignore SIGINT.
signal_at_stalls() {
  local faults=$1 signals=$2 pid sig
  shift 3
  set -m
  SHAMN_FAULT=$faults "$@" &
  pid=$!
  set +m
  for sig in $signals; do
    for _ in $(seq 1 2400); do  # polls the process's state: stopped, or gone
      [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2> /dev/null)" = T ] || ! kill -0 $pid 2> /dev/null && break
      sleep 0.05
    done
    [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2> /dev/null)" = T ] ||
      { kill -KILL $pid 2> /dev/null; fail "$* did not stop at a stall of $faults"; }
    stall_threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
    kill -$sig $pid
    kill -CONT $pid
  done
  wait $pid
}
all_load() {  # every checkpoint in DIR loads
  for f in "$1"/ckpt_*.h5 "$1"/best.h5; do
    [ -e "$f" ] || continue
    "$shamn" info "$f" > /dev/null 2>&1 || fail "$2: $f does not load"
  done
}

train_into "$work/ref" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "the reference run failed"; }
ref_digest=$(digest "$work/ref/ckpt_00000006.h5")
ref_best_digest=$(digest "$work/ref/best.h5")
ref_metrics=$(metrics "$work/ref/metrics.jsonl")
tensors=$(echo "$ref_digest" | grep -c -E '^(model|optim)\.')
[ "$tensors" -gt 10 ] || fail "the reference checkpoint lists only $tensors tensors"

# A resume under changed settings names each change; an exact one names none.
cp -r "$work/ref" "$work/more"
"$shamn" --threads 1 train --resume "$work/more" --set train.max_steps=7 > "$work/more.log" 2>&1 ||
  { cat "$work/more.log"; fail "the resume with more steps failed"; }
grep -q "settings changed since .*ckpt_00000006.h5: train.max_steps 6 -> 7$" "$work/more.log" ||
  { cat "$work/more.log"; fail "the resume did not name train.max_steps 6 -> 7"; }

# Finishes the run in DIR (a resume, or a fresh start where no checkpoint was
# written) and checks it against the reference.
finish_and_compare() {
  local dir=$1 what=$2
  if ls "$dir"/ckpt_*.h5 > /dev/null 2>&1; then
    "$shamn" --threads 1 train --resume "$dir" > "$dir.resume.log" 2>&1 ||
      { cat "$dir.resume.log"; fail "$what: --resume failed"; }
    ! grep -q "settings changed" "$dir.resume.log" || fail "$what: an exact resume reported changed settings"
  else
    train_into "$dir" > "$dir.resume.log" 2>&1 || { cat "$dir.resume.log"; fail "$what: the restart failed"; }
  fi
  [ "$(digest "$dir/ckpt_00000006.h5")" = "$ref_digest" ] ||
    fail "$what: the final weights, moments or state differ from the uninterrupted run"
  [ "$(digest "$dir/best.h5")" = "$ref_best_digest" ] || fail "$what: best.h5 differs from the uninterrupted run's"
  [ "$(metrics "$dir/metrics.jsonl")" = "$ref_metrics" ] ||
    { diff <(metrics "$dir/metrics.jsonl") <(echo "$ref_metrics") || true; fail "$what: metrics differ"; }
  no_temp_files "$dir" "$what"
}

cases=0
# A kill at every site of a training run (checkpoints are ckpt 2, 3 (best), 4, 6 (best)).
for spec in "text.rename:1" "checkpoint.tensor:1" "checkpoint.tensor:$((tensors / 2))" \
            "checkpoint.tensor:$tensors" "checkpoint.tensor:$((tensors + tensors / 3))" \
            "checkpoint.fsync:2" "checkpoint.rename:2" "checkpoint.dirsync:2" "checkpoint.rename:4" \
            "metrics.append:1" "metrics.append:4" "metrics.append:5" "best.link:1" "best.link:2"; do
  dir=$work/kill_${spec//[:.]/_}
  status=0
  SHAMN_FAULT=$spec train_into "$dir" > "$dir.log" 2>&1 || status=$?
  [ "$status" -eq 137 ] || { cat "$dir.log"; fail "$spec: expected death by SIGKILL (137), got $status"; }
  all_load "$dir" "$spec"
  finish_and_compare "$dir" "kill at $spec"
  cases=$((cases + 1))
done

# Stop signals during the first checkpoint's write. SIGHUP (a closed terminal,
# which sends it twice: the shell's and the kernel's) asks for a stop as SIGINT
# does, its second never kills: the checkpoint is finished and the run ends after
# the next step, with its checkpoint. A second SIGTERM ends it at once (143), the
# temporary file removed.
dir=$work/sighup
status=0
signal_at_stalls checkpoint.tensor:3:stall,checkpoint.tensor:6:stall "HUP HUP" -- "$shamn" --threads 1 train \
  "$config" "${sets[@]}" \
  --set "train.out_dir=\"$dir\"" > "$dir.log" 2>&1 || status=$?
[ "$status" -eq 0 ] && grep -q "stopped by signal 1 at step 3" "$dir.log" && [ -e "$dir/ckpt_00000003.h5" ] ||
  { cat "$dir.log"; fail "SIGHUP mid-checkpoint: status $status, not stopped at step 3 with its checkpoint"; }
finish_and_compare "$dir" "SIGHUP mid-checkpoint"
cases=$((cases + 1))
dir=$work/sigterm_twice
status=0
signal_at_stalls checkpoint.tensor:3:stall,checkpoint.tensor:6:stall "TERM TERM" -- "$shamn" --threads 1 train \
  "$config" "${sets[@]}" --set "train.out_dir=\"$dir\"" > "$dir.log" 2>&1 || status=$?
[ "$status" -eq 143 ] || { cat "$dir.log"; fail "two SIGTERMs mid-checkpoint: expected 143, got $status"; }
no_temp_files "$dir" "two SIGTERMs mid-checkpoint"
finish_and_compare "$dir" "two SIGTERMs mid-checkpoint"
cases=$((cases + 1))

# Killed again while resuming: in the rewrite of the metrics history, and at the
# resumed run's first checkpoint.
for spec in "metrics.bytes:100" "metrics.rename:1" "checkpoint.tensor:3"; do
  dir=$work/resume_${spec//[:.]/_}
  status=0
  SHAMN_FAULT=checkpoint.rename:3 train_into "$dir" > "$dir.log" 2>&1 || status=$?
  [ "$status" -eq 137 ] || fail "resume case $spec: the first kill did not happen ($status)"
  status=0
  SHAMN_FAULT=$spec "$shamn" --threads 1 train --resume "$dir" > "$dir.log2" 2>&1 || status=$?
  [ "$status" -eq 137 ] || { cat "$dir.log2"; fail "resume killed at $spec: got $status"; }
  all_load "$dir" "resume killed at $spec"
  [ "$(wc -l < "$dir/metrics.jsonl")" -ge 2 ] || fail "resume killed at $spec: the metrics history was lost"
  finish_and_compare "$dir" "resume killed at $spec"
  cases=$((cases + 1))
done

# A full disk or an I/O error: status 1, one error line naming the cause and the
# last good checkpoint, which loads; nothing half-written; then a resume finishes.
for spec in "checkpoint.tensor:$((tensors + 3)):enospc" "checkpoint.fsync:2:eio" \
            "checkpoint.rename:3:enospc" "metrics.append:5:enospc" "best.link:2:enospc"; do
  dir=$work/err_${spec//[:.]/_}
  status=0
  SHAMN_FAULT=$spec train_into "$dir" > "$dir.log" 2> "$dir.err" || status=$?
  [ "$status" -eq 1 ] || { cat "$dir.err"; fail "$spec: expected exit status 1, got $status"; }
  [ "$(wc -l < "$dir.err")" -eq 1 ] || { cat "$dir.err"; fail "$spec: expected one error line"; }
  case $spec in *enospc) cause="No space left on device" ;; *) cause="Input/output error" ;; esac
  grep -q "^shamn: error: .*$cause.*the last good checkpoint is $dir/\(ckpt_\|best\.h5\)" "$dir.err" ||
    { cat "$dir.err"; fail "$spec: the error does not name the cause and the last good checkpoint"; }
  last=$(sed -E 's/.*the last good checkpoint is ([^ ]*\.h5)\..*/\1/' "$dir.err")
  "$shamn" info "$last" > /dev/null || fail "$spec: the last good checkpoint $last does not load"
  no_temp_files "$dir" "$spec"
  all_load "$dir" "$spec"
  finish_and_compare "$dir" "$spec"
  cases=$((cases + 1))
done

# A file system without hard links (the link refused at best.hardlink): best.h5
# is a copy, written atomically; the run ends as the reference with best.h5
# equal to its best checkpoint, not linked to it. Killed in the middle of the
# second best's copy (its 100,000th byte), the first best.h5 stays whole.
dir=$work/best_copy
SHAMN_FAULT=best.hardlink:1:eio,best.hardlink:2:eio train_into "$dir" > "$dir.log" 2>&1 ||
  { cat "$dir.log"; fail "best.hardlink: the run failed"; }
cmp -s "$dir/best.h5" "$dir/ckpt_00000006.h5" || fail "best.hardlink: best.h5 is not the step 6 checkpoint"
[ "$(stat -c %h "$dir/best.h5")" -eq 1 ] || fail "best.hardlink: best.h5 is a hard link, not a copy"
finish_and_compare "$dir" "best.hardlink"
dir=$work/best_copy_kill
status=0
SHAMN_FAULT=best.hardlink:2:eio,best.bytes:100000 train_into "$dir" > "$dir.log" 2>&1 ||
  status=$?
[ "$status" -eq 137 ] || { cat "$dir.log"; fail "best.bytes: expected death by SIGKILL (137), got $status"; }
"$shamn" info "$dir/best.h5" > /dev/null || fail "best.bytes: best.h5 does not load after a kill mid-copy"
all_load "$dir" "best.bytes"
finish_and_compare "$dir" "best.bytes"
cases=$((cases + 3))

# A best that is not the last evaluation (a high learning rate, an evaluation every
# second step), keep_last 1, killed once the best is written as best.h5 and again
# between best.h5 and its step name: the resumed run ends with best.h5 bitwise the
# uninterrupted run's (once, a crash in that window left best.h5 a step behind the
# best_val_loss the run resumed with, so it was never replaced and pruning deleted
# the only copy of the best weights).
late=(--set train.max_steps=10 --set train.eval_every=2 --set train.keep_last=1 --set optim.lr=0.1)
train_into "$work/late_ref" "${late[@]}" > "$work/late_ref.log" 2>&1 ||
  { cat "$work/late_ref.log"; fail "the reference run with a late best failed"; }
best_step=$("$shamn" info "$work/late_ref/best.h5" | sed -n 's/^step  *//p')
bests=$(grep -c "(best)" "$work/late_ref.log")
[ "$best_step" -lt 10 ] && [ "$bests" -ge 2 ] ||
  fail "the late-best reference's best is step $best_step after $bests bests: the case cannot tell"
# The first checkpoint (step 2) is a best too: killed before its step name is
# made (linked, or copied where there are no hard links), or the link failing
# with a full disk, the directory holds best.h5 alone, which --resume takes up.
for spec in "checkpoint.dirsync:$((best_step / 2))" "best.link:$bests" "best.link:1" \
            "best.hardlink:1:eio,best.bytes:1000" "best.link:1:enospc"; do
  dir=$work/late_${spec//[:.,]/_}
  status=0
  SHAMN_FAULT=$spec train_into "$dir" "${late[@]}" > "$dir.log" 2> "$dir.err" || status=$?
  case $spec in
    *enospc)
      [ "$status" -eq 1 ] && grep -q "the last good checkpoint is $dir/best.h5.*--resume" "$dir.err" ||
        { cat "$dir.err"; fail "late best, $spec: expected status 1 naming best.h5 and --resume, got $status"; } ;;
    *) [ "$status" -eq 137 ] || { cat "$dir.err"; fail "late best, $spec: expected death by SIGKILL, got $status"; } ;;
  esac
  "$shamn" --threads 1 train --resume "$dir" > "$dir.resume.log" 2>&1 ||
    { cat "$dir.resume.log"; fail "late best, $spec: --resume failed"; }
  [ "$(digest "$dir/best.h5")" = "$(digest "$work/late_ref/best.h5")" ] ||
    fail "late best, $spec: best.h5 is not the uninterrupted run's (step $best_step)"
  [ "$(digest "$dir/ckpt_00000010.h5")" = "$(digest "$work/late_ref/ckpt_00000010.h5")" ] ||
    fail "late best, $spec: the final checkpoint differs"
  no_temp_files "$dir" "late best, $spec"
  cases=$((cases + 1))
done

# A real write error inside HDF5, not an injected one: the file size limit
# (shamn ignores SIGXFSZ, so writes past it fail with EFBIG as on a full disk) is
# below one checkpoint's size, so the first checkpoint fails inside HDF5. Status 1 (once a crash in HDF5's exit-time cleanup), one line that says
# no checkpoint was written and to run the command again, no temporary file;
# the same command then finishes as the reference.
dir=$work/err_file_size_limit
status=0
(ulimit -f 64; train_into "$dir") > "$dir.log" 2> "$dir.err" || status=$?
[ "$status" -eq 1 ] || { cat "$dir.err"; fail "file size limit: expected exit status 1, got $status"; }
[ "$(wc -l < "$dir.err")" -eq 1 ] || { cat "$dir.err"; fail "file size limit: expected one error line"; }
grep -q "^shamn: error: writing .*'$dir/ckpt_00000002.h5' failed.*size limit.*the last good checkpoint is none.*run the same command again" "$dir.err" ||
  { cat "$dir.err"; fail "file size limit: the error does not name the checkpoint and what to do"; }
no_temp_files "$dir" "file size limit"
finish_and_compare "$dir" "file size limit"
cases=$((cases + 1))

# The other writers. Tokenizer and token files: a crash leaves no partial file, and
# the rerun (which removes the dead writer's temporary file) gives the same bytes.
for i in $(seq 1 200); do printf 'Paragraph %d: the jury said %d times.\n\n' "$i" $((i * 37)); done > "$work/text.txt"
tok() { "$shamn" tokenizer train --input "$work/text.txt" --vocab 300 -o "$1" > /dev/null; }
prep() { "$shamn" prepare --input "$work/text.txt" --tokenizer "$work/tok.bpe" --out "$1" > /dev/null; }
tok "$work/tok.bpe"
prep "$work/prep_ref"
for spec in "tokenizer.bytes:100" "tokenizer.rename:1" "tokenizer.bytes:100:enospc"; do
  status=0
  SHAMN_FAULT=$spec tok "$work/tok_f.bpe" 2> "$work/tok_f.err" || status=$?
  case $spec in *enospc) want=1 ;; *) want=137 ;; esac
  [ "$status" -eq "$want" ] || fail "tokenizer $spec: got status $status"
  [ ! -e "$work/tok_f.bpe" ] || fail "tokenizer $spec: a partial tokenizer file was left"
  tok "$work/tok_f.bpe" && cmp -s "$work/tok_f.bpe" "$work/tok.bpe" || fail "tokenizer $spec: the rerun differs"
  no_temp_files "$work" "tokenizer $spec"
  rm "$work/tok_f.bpe"
  cases=$((cases + 1))
done
for spec in "tokens.bytes:0" "tokens.bytes:1500" "tokens.rename:2" "tokens.bytes:1500:enospc"; do
  out=$work/prep_${spec//[:.]/_}
  status=0
  SHAMN_FAULT=$spec prep "$out" 2> "$out.err" || status=$?
  case $spec in *enospc) want=1 ;; *) want=137 ;; esac
  [ "$status" -eq "$want" ] || { cat "$out.err"; fail "prepare $spec: got status $status"; }
  for f in "$out"/*.bin; do  # what is there is whole
    [ -e "$f" ] || continue
    cmp -s "$f" "$work/prep_ref/$(basename "$f")" || fail "prepare $spec: a partial $(basename "$f") was left"
  done
  prep "$out" || fail "prepare $spec: the rerun failed"
  for f in train.bin val.bin; do cmp -s "$out/$f" "$work/prep_ref/$f" || fail "prepare $spec: $f differs"; done
  no_temp_files "$out" "prepare $spec"
  cases=$((cases + 1))
done

# Ctrl-C while prepare replaces the pair (stopped at its first rename, after the
# old val.bin is gone): the signal waits until both new files are in place, then
# ends it (status 130). A text of 1 MB, so that a worker thread exists to take
# the signal (the main thread blocks it; the wait must hold for the process).
for i in $(seq 1 128); do cat "$work/text.txt"; done > "$work/big.txt"
"$shamn" prepare --input "$work/big.txt" --tokenizer "$work/tok.bpe" --out "$work/prep_big_ref" > /dev/null
out=$work/prep_sigint
prep "$out"
status=0
signal_at_stalls tokens.rename:1:stall INT -- "$shamn" --threads 2 prepare --input "$work/big.txt" \
  --tokenizer "$work/tok.bpe" --out "$out" > /dev/null 2> "$out.err" || status=$?
[ "$stall_threads" -ge 2 ] || fail "prepare under SIGINT: $stall_threads thread at the stall, so no worker to take the signal"
[ "$status" -eq 130 ] || { cat "$out.err"; fail "prepare under SIGINT: expected status 130, got $status"; }
for f in train.bin val.bin; do
  cmp -s "$out/$f" "$work/prep_big_ref/$f" || fail "prepare under SIGINT: $f is not whole"
done
no_temp_files "$out" "prepare under SIGINT"
cases=$((cases + 1))

# export: a crash while replacing an existing .shq leaves the old file as it was.
"$shamn" export "$work/ref/ckpt_00000006.h5" --quant int8 --no-tokenizer -o "$work/model.shq" > /dev/null
cp "$work/model.shq" "$work/model_before.shq"
for spec in "shq.bytes:0" "shq.bytes:4096" "shq.fsync:1" "shq.rename:1" "shq.bytes:4096:enospc"; do
  status=0
  SHAMN_FAULT=$spec "$shamn" export "$work/ref/ckpt_00000004.h5" --quant int8 --no-tokenizer \
    -o "$work/model.shq" > /dev/null 2> "$work/export.err" || status=$?
  case $spec in *enospc) want=1 ;; *) want=137 ;; esac
  [ "$status" -eq "$want" ] || { cat "$work/export.err"; fail "export $spec: got status $status"; }
  cmp -s "$work/model.shq" "$work/model_before.shq" || fail "export $spec: the existing model file was damaged"
  cases=$((cases + 1))
done
# And past a file size limit, not injected: status 1 naming the file, the old file kept, no temporary file.
for quant in int8 f32; do
  status=0
  (ulimit -f 100; "$shamn" export "$work/ref/ckpt_00000004.h5" --quant $quant --no-tokenizer -o "$work/model.shq") \
    > /dev/null 2> "$work/export.err" || status=$?
  [ "$status" -eq 1 ] && grep -q "^shamn: error: .*'$work/model.shq'.*File too large" "$work/export.err" ||
    { cat "$work/export.err"; fail "export past the file size limit ($quant): status $status"; }
  cmp -s "$work/model.shq" "$work/model_before.shq" || fail "export past the file size limit: the old file was damaged"
  no_temp_files "$work" "export past the file size limit"
  cases=$((cases + 1))
done
# Ctrl-C mid-write (export has no handler of its own): status 130, the old file
# as it was, no temporary file. A stall alone only pauses the write.
status=0
signal_at_stalls shq.bytes:4096:stall INT -- "$shamn" export "$work/ref/ckpt_00000004.h5" --quant int8 \
  --no-tokenizer -o "$work/model.shq" > /dev/null 2> "$work/export.err" || status=$?
[ "$status" -eq 130 ] || { cat "$work/export.err"; fail "export under SIGINT: expected 130, got $status"; }
cmp -s "$work/model.shq" "$work/model_before.shq" || fail "export under SIGINT: the existing model file was damaged"
no_temp_files "$work" "export under SIGINT"
signal_at_stalls shq.bytes:4096:stall CONT -- "$shamn" export "$work/ref/ckpt_00000004.h5" --quant int8 \
  --no-tokenizer -o "$work/model_stalled.shq" > /dev/null || fail "export with a stall failed"
cases=$((cases + 2))
"$shamn" export "$work/ref/ckpt_00000004.h5" --quant int8 --no-tokenizer -o "$work/model.shq" > /dev/null
cmp -s "$work/model.shq" "$work/model_stalled.shq" || fail "a stall changed the exported file"
no_temp_files "$work" "export"

# A sweep killed as it writes a point's result.json: the rerun finishes it, with
# the same results apart from the timing columns.
mkdir -p "$work/sweep" && cd "$work/sweep"
"$shamn" synthetic --out runs/sweep_tiny_data --vocab 64 --successors 4 --tokens 200000 > /dev/null
sweep_sets=(--jobs 1 --set train.max_steps=20 --set train.checkpoint_every=10)
"$shamn" sweep "$sweep" "${sweep_sets[@]}" --out-dir ref > ref.log 2>&1 || { cat ref.log; fail "reference sweep"; }
untimed() { /usr/bin/python3 "$here/../sweep/untimed_results.py" "$1"; }
untimed ref/results.csv > /dev/null || fail "results.csv lost a timing column"
for spec in "result.rename:2" "result.bytes:10"; do
  dir=f_${spec//[:.]/_}
  status=0
  SHAMN_FAULT=$spec "$shamn" sweep "$sweep" "${sweep_sets[@]}" --out-dir "$dir" > "$dir.log" 2>&1 || status=$?
  [ "$status" -eq 137 ] || { cat "$dir.log"; fail "sweep $spec: got status $status"; }
  [ ! -e "$dir/results.csv" ] || fail "sweep $spec: results.csv written before every point finished"
  "$shamn" sweep "$sweep" "${sweep_sets[@]}" --out-dir "$dir" > "$dir.log2" 2>&1 ||
    { cat "$dir.log2"; fail "sweep $spec: the rerun failed"; }
  [ "$(untimed "$dir/results.csv")" = "$(untimed ref/results.csv)" ] ||
    { diff <(untimed "$dir/results.csv") <(untimed ref/results.csv) || true; fail "sweep $spec: results differ"; }
  for point in "$dir"/*/; do no_temp_files "$point" "sweep $spec"; done
  cases=$((cases + 1))
done

echo "fault_injection: ok ($cases cases)"
rm -rf "$work"
