#!/usr/bin/env bash
# Data-parallel training under mpirun (train/communicator.h), on the tiny config
# with 4 micro-batches per step:
#   - 1, 2 and 4 ranks end with bitwise the same weights, AdamW moments, state and
#     metrics (evaluations included), with the exchange overlapped with the
#     backward pass or not, in big or tiny buckets;
#   - a 4-rank run whose ranks 1-3 are killed (SIGKILL, at a named point: no
#     timing) ends with an error and no hang; --resume on 2 ranks then finishes
#     bitwise equal to the uninterrupted run;
#   - a rank that stalls (SIGSTOP) makes rank 0 stop with an error naming it;
#   - SIGUSR1 to mpirun stops every rank after the same step, with one checkpoint,
#     also while rank 1 waits for rank 0 to load the weights or write the last one;
#   - ranks whose data files differ, 3 ranks, or 4 ranks for 2 micro-batches are
#     refused before any step.
# Usage: mpi_train.sh SHAMN_BINARY CONFIG WORKDIR
set -euo pipefail
shamn=$(realpath "$1") config=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
# Open MPI refuses root without these; CI runs as root on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none)
"$shamn" synthetic --out "$work/data" --vocab 64 --successors 4 --tokens 60000 > /dev/null

sets=(--set "data.train_path=\"$work/data/train.bin\"" --set "data.val_path=\"$work/data/val.bin\""
      --set model.vocab_size=64 --set model.embed.buckets=32 --set train.max_steps=4
      --set train.grad_accum=4 --set train.batch_size=2 --set train.checkpoint_every=2
      --set train.eval_every=2 --set train.eval_batches=3 --set optim.warmup_steps=1
      --set 'log.progress="never"')
digest() { "$shamn" info "$1" --tensors | sed -n '/^# tensors/,$p'; }
metrics() { sed -E 's/,"(tokens_per_s|elapsed_s)":[^,}]*//g' "$1"; }

# n2 runs with --profile, n2plain exchanges after the backward pass instead of
# during it, n4small in buckets of 1 KiB (dozens in flight at once): none of
# these may change a bit.
for run in 1:n1 2:n2 4:n4 2:n2plain 4:n4small; do
  n=${run%%:*} name=${run#*:}
  extra=()
  case $name in
    n2) extra=(--profile) ;;
    n2plain) extra=(--set train.overlap_exchange=false) ;;
    n4small) extra=(--set train.bucket_mib=0.001) ;;
  esac
  "${mpi[@]}" -np $n "$shamn" --threads 1 train "$config" "${sets[@]}" --set "train.out_dir=\"$work/$name\"" \
    "${extra[@]}" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "the $n-rank run $name failed"; }
done
grep -q "data parallel: 4 ranks, 1 micro-batch" "$work/n4.log" || fail "the 4-rank run did not say it had 4 ranks"
ref_digest=$(digest "$work/n1/ckpt_00000004.h5")
ref_metrics=$(metrics "$work/n1/metrics.jsonl")
[ "$(echo "$ref_digest" | grep -c -E '^(model|optim)\.')" -gt 10 ] || fail "the reference lists too few tensors"
echo "$ref_digest" | grep -q "^optim_unreached [0-9]* names, crc32 [0-9a-f]\{8\}$" ||
  fail "the digest leaves out which parameters AdamW has not reached"
[ "$(grep -c val_loss "$work/n1/metrics.jsonl")" = 2 ] || fail "the reference has no evaluations"
for name in n2 n4 n2plain n4small; do
  [ "$(digest "$work/$name/ckpt_00000004.h5")" = "$ref_digest" ] ||
    fail "$name: the weights, moments or state differ from 1 rank"
  [ "$(metrics "$work/$name/metrics.jsonl")" = "$ref_metrics" ] ||
    { diff <(metrics "$work/$name/metrics.jsonl") <(echo "$ref_metrics") || true; fail "$name: metrics differ"; }
done
echo "1, 2 and 4 ranks, overlapped or not, any bucket size: bitwise equal"

# LoRA with dropout from n1's weights: a micro-batch's masks are keyed by its
# number in the run, not by the rank that draws them, so 1 and 4 ranks agree.
lora=(--set "train.init_from=\"$work/n1/ckpt_00000004.h5\"" --set lora.rank=4 --set lora.alpha=8.0
      --set 'lora.targets=["layers.*.mixer.out", "layers.*.moe.experts.*.up"]' --set lora.dropout=0.25)
for run in 1:lora1 4:lora4; do
  n=${run%%:*} name=${run#*:}
  "${mpi[@]}" -np $n "$shamn" --threads 1 train "$config" "${sets[@]}" "${lora[@]}" \
    --set "train.out_dir=\"$work/$name\"" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "the $n-rank LoRA run failed"; }
done
[ "$(digest "$work/lora4/ckpt_00000004.h5")" = "$(digest "$work/lora1/ckpt_00000004.h5")" ] ||
  fail "LoRA with dropout: the adapters or moments on 4 ranks differ from 1 rank"
[ "$(metrics "$work/lora4/metrics.jsonl")" = "$(metrics "$work/lora1/metrics.jsonl")" ] ||
  fail "LoRA with dropout: the metrics on 4 ranks differ from 1 rank"
[ "$(digest "$work/lora1/ckpt_00000004.h5" | grep -c 'lora_b')" -gt 2 ] || fail "the LoRA digest lists no adapters"
echo "LoRA with dropout on 1 and 4 ranks: bitwise equal"
# --profile on 2 ranks: rank 0 prints one table, with the exchange split into
# waiting and summing; rank 1 writes its trace beside rank 0's.
[ "$(grep -c "^profile: " "$work/n2.log")" = 1 ] || fail "2 ranks: not exactly one profile table"
grep -q "^sum_gradients  *comm" "$work/n2.log" || fail "2 ranks: no sum_gradients row in the profile"
grep -q '"sum_gradients"' "$work/n2/profile.rank1.json" || fail "2 ranks: rank 1 wrote no trace"

# Ranks 1-3 die at step 3's exchange, after the step-2 checkpoint.
killed=$work/killed
if "${mpi[@]}" -np 1 "$shamn" --threads 1 train "$config" "${sets[@]}" --set "train.out_dir=\"$killed\"" : \
     -np 3 env SHAMN_FAULT=train.exchange:3 "$shamn" --threads 1 train "$config" "${sets[@]}" \
     --set "train.out_dir=\"$killed\"" > "$killed.log" 2>&1; then
  fail "the run with killed ranks exited 0"
fi
# The README's promise: mpirun names the rank that died (shamn itself is killed with the job).
grep -qE "mpirun noticed that process rank [123] .* exited on signal 9" "$killed.log" ||
  { cat "$killed.log"; fail "mpirun did not name a dead rank"; }
[ -f "$killed/ckpt_00000002.h5" ] || fail "the step-2 checkpoint is missing after the crash"
"${mpi[@]}" -np 2 "$shamn" --threads 1 train --resume "$killed" > "$killed.resume.log" 2>&1 ||
  { cat "$killed.resume.log"; fail "--resume on 2 ranks failed"; }
[ "$(digest "$killed/ckpt_00000004.h5")" = "$ref_digest" ] ||
  fail "killed at 4 ranks, resumed at 2: the final state differs from the uninterrupted run"
[ "$(metrics "$killed/metrics.jsonl")" = "$ref_metrics" ] || fail "killed and resumed: metrics differ"
echo "killed at 4 ranks, resumed at 2: bitwise equal"

# Experts first reached after step 1 (8 tokens a step over 8 experts a group, k
# 1) take AdamW's first update with their own t: rank 0 reads each one's count
# from the checkpoint and every rank must get it. 4 steps on 1 rank against 2 on
# 1 rank resumed for 2 more on 2 (a flat learning rate: max_steps does not move it).
late=(--set train.batch_size=1 --set train.seq_len=2 --set model.moe.experts_per_group=8
      --set model.moe.k=1 --set optim.min_lr=3e-3 --set train.eval_every=0)
"${mpi[@]}" -np 1 "$shamn" --threads 1 train "$config" "${sets[@]}" "${late[@]}" \
  --set "train.out_dir=\"$work/late1\"" > "$work/late1.log" 2>&1 || { cat "$work/late1.log"; fail "late1"; }
"${mpi[@]}" -np 1 "$shamn" --threads 1 train "$config" "${sets[@]}" "${late[@]}" --set train.max_steps=2 \
  --set "train.out_dir=\"$work/late2\"" > "$work/late2.log" 2>&1 || { cat "$work/late2.log"; fail "late2"; }
digest "$work/late2/ckpt_00000002.h5" | grep -q "^optim_late_updates [1-9][0-9]* names" ||
  fail "no expert was first reached at step 2: the case tests nothing"
"${mpi[@]}" -np 2 "$shamn" --threads 1 train --resume "$work/late2" --set train.max_steps=4 \
  > "$work/late2.resume.log" 2>&1 || { cat "$work/late2.resume.log"; fail "late2: --resume on 2 ranks"; }
[ "$(digest "$work/late2/ckpt_00000004.h5")" = "$(digest "$work/late1/ckpt_00000004.h5")" ] ||
  fail "experts first reached late, resumed on 2 ranks: the final state differs"
echo "experts first reached late, resumed on 2 ranks: bitwise equal"

# Rank 1 stops answering at step 2; rank 0 gives up after SHAMN_COMM_TIMEOUT.
stalled=$work/stalled
if SHAMN_COMM_TIMEOUT=2 "${mpi[@]}" -x SHAMN_COMM_TIMEOUT -np 1 "$shamn" --threads 1 train "$config" "${sets[@]}" \
     --set "train.out_dir=\"$stalled\"" : -np 1 env SHAMN_FAULT=train.exchange:2:stall "$shamn" --threads 1 \
     train "$config" "${sets[@]}" --set "train.out_dir=\"$stalled\"" > "$stalled.log" 2>&1; then
  fail "the run with a stalled rank exited 0"
fi
grep -qE "rank 0 waited 2 s for [a-z -]+ from rank 1, which died or stalled" "$stalled.log" ||
  { cat "$stalled.log"; fail "the stall was not reported naming rank 1"; }
echo "a stalled rank: stopped with an error naming it"

# SIGUSR1 to mpirun, which forwards it to every rank (Ctrl-C or SIGTERM to mpirun
# would kill them a second later): all stop after the same step, one checkpoint, 0.
# The signal goes once the first step is logged (every rank has its handlers by
# then: step 1's exchange needed all of them); when, after that, does not matter.
usr=$work/usr1
"${mpi[@]}" -np 2 "$shamn" --threads 1 train "$config" "${sets[@]}" --set train.max_steps=1000000 \
  --set train.checkpoint_every=1000000 --set train.eval_every=1000000 --set log.every=1 \
  --set "train.out_dir=\"$usr\"" > "$usr.log" 2>&1 &
mpirun_pid=$!
# Should a check below fail, the run (a million steps) must not outlive the test.
trap 'kill -TERM $mpirun_pid 2> /dev/null || true' EXIT  # mpirun ends its ranks
for _ in $(seq 1500); do
  grep -q '"step"' "$usr/metrics.jsonl" 2> /dev/null && break
  kill -0 $mpirun_pid 2> /dev/null || break
  sleep 0.2
done
grep -q '"step"' "$usr/metrics.jsonl" || { cat "$usr.log"; fail "SIGUSR1: the run logged no step"; }
kill -USR1 $mpirun_pid
status=0
wait $mpirun_pid || status=$?
trap - EXIT
[ "$status" -eq 0 ] || { cat "$usr.log"; fail "SIGUSR1: mpirun exited $status"; }
[ "$(grep -c "stopped by signal 10 at step" "$usr.log")" = 1 ] ||
  { cat "$usr.log"; fail "SIGUSR1: no single 'stopped by signal 10' line"; }
ckpts=("$usr"/ckpt_*.h5)
[ ${#ckpts[@]} = 1 ] && [ -f "${ckpts[0]}" ] || fail "SIGUSR1: not exactly one checkpoint: ${ckpts[*]}"
last=$(grep -o '"step":[0-9]*' "$usr/metrics.jsonl" | tail -1 | cut -d: -f2)
[ "${ckpts[0]}" = "$(printf "%s/ckpt_%08d.h5" "$usr" "$last")" ] ||
  fail "SIGUSR1: the checkpoint ${ckpts[0]} is not the last logged step $last"
echo "SIGUSR1 to mpirun: every rank stopped after the same step, one checkpoint"

# The same signal while rank 1 waits for rank 0: at the start, while rank 0 loads
# the weights, and at the end, while rank 0 writes the last checkpoint. Rank 0
# stops itself (SIGSTOP) at a named point; the signal goes once rank 1 has its
# handlers (/proc's SigCgt), and rank 0 continues once it is pending there too.
# Without handlers the signal kills rank 1, and mpirun rank 0 mid-write.
has_usr1() {  # has_usr1 PID FIELD: SIGUSR1 (10, bit 9) in /proc/PID/status's FIELD mask
  local mask
  mask=$(awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2> /dev/null) || return 1
  [ -n "$mask" ] && (((16#$mask >> 9) & 1))
}
rank_pids() {  # the pids of the processes training into $1
  local stat p
  for stat in /proc/[0-9]*/stat; do
    p=${stat#/proc/} p=${p%/stat}
    [[ "$(tr '\0' ' ' 2> /dev/null < "/proc/$p/cmdline")" == "$shamn --threads 1 train "*"$1"* ]] && echo "$p"
  done
  return 0
}
state_of() { cut -d' ' -f3 "/proc/$1/stat" 2> /dev/null; }  # /proc/PID/stat: pid (comm) state ...
stop_while_rank0_waits() {  # stop_while_rank0_waits NAME FAULT_SITE SETS...
  local name=$1 dir=$work/$1 site=$2 pids=() r0= r1= mpirun_pid
  shift 2
  "${mpi[@]}" -np 1 env SHAMN_FAULT="$site:1:stall" "$shamn" --threads 1 train "$config" "${sets[@]}" "$@" \
    --set "train.out_dir=\"$dir\"" : -np 1 "$shamn" --threads 1 train "$config" "${sets[@]}" "$@" \
    --set "train.out_dir=\"$dir\"" > "$dir.log" 2>&1 &
  mpirun_pid=$!
  trap 'kill -KILL $mpirun_pid ${pids[*]} 2> /dev/null || true' EXIT
  for _ in $(seq 600); do
    kill -0 $mpirun_pid 2> /dev/null || { cat "$dir.log"; fail "$name: mpirun ended early"; }
    [ ${#pids[@]} = 2 ] || mapfile -t pids < <(rank_pids "$dir")
    if [ ${#pids[@]} = 2 ]; then
      [ "$(state_of "${pids[0]}")" = T ] && r0=${pids[0]} r1=${pids[1]}
      [ "$(state_of "${pids[1]}")" = T ] && r0=${pids[1]} r1=${pids[0]}
      [ -n "$r0" ] && has_usr1 "$r1" SigCgt && break
    fi
    sleep 0.2
  done
  [ -n "$r0" ] && has_usr1 "$r1" SigCgt || { cat "$dir.log"; fail "$name: rank 1 has no SIGUSR1 handler"; }
  kill -USR1 $mpirun_pid
  for _ in $(seq 1500); do
    has_usr1 "$r0" ShdPnd && grep -q "stopping after this step" "$dir.log" && break
    sleep 0.2
  done
  kill -CONT "$r0"
  local status=0
  wait $mpirun_pid || status=$?
  trap - EXIT
  [ "$status" -eq 0 ] || { cat "$dir.log"; fail "$name: mpirun exited $status"; }
}
stop_while_rank0_waits usr1_start train.start
grep -q "stopped by signal 10 at step 1;" "$work/usr1_start.log" || { cat "$work/usr1_start.log"; fail "start: no stop at step 1"; }
[ -f "$work/usr1_start/ckpt_00000001.h5" ] || fail "start: no checkpoint of step 1"
stop_while_rank0_waits usr1_end checkpoint.rename --set train.checkpoint_every=0 --set train.eval_every=0
[ "$(digest "$work/usr1_end/ckpt_00000004.h5")" = "$ref_digest" ] || fail "end: the last checkpoint differs from 1 rank"
! ls "$work/usr1_end" | grep -q tmp || fail "end: a temporary file was left: $(ls "$work/usr1_end")"
echo "SIGUSR1 while rank 0 loads or writes the last checkpoint: exit 0, the checkpoint whole"

# Refusals, each before the first step.
refused() {  # refused WHAT NEEDLE LOG
  grep -q "$2" "$3" || { cat "$3"; fail "$1: no error saying '$2'"; }
  ! grep -q "^step\|ckpt_" "$3" || fail "$1: the run started"
}
mkdir -p "$work/a" "$work/b"
cp "$work/data/train.bin" "$work/a/train.bin"
"$shamn" synthetic --out "$work/b" --vocab 64 --successors 4 --tokens 60000 --seed 7 > /dev/null
rel=(--set 'data.train_path="train.bin"' --set 'data.val_path=""' --set 'train.out_dir="run"')
if "${mpi[@]}" -np 1 -wdir "$work/a" "$shamn" train "$config" "${sets[@]}" "${rel[@]}" : \
     -np 1 -wdir "$work/b" "$shamn" train "$config" "${sets[@]}" "${rel[@]}" > "$work/mismatch.log" 2>&1; then
  fail "ranks with different data files were not refused"
fi
refused "different data" "rank 1: its data checksum (CRC-32 of train, val) does not match rank 0's" "$work/mismatch.log"
if "${mpi[@]}" -np 3 "$shamn" train "$config" "${sets[@]}" --set "train.out_dir=\"$work/n3\"" \
     > "$work/n3.log" 2>&1; then
  fail "3 ranks were not refused"
fi
refused "3 ranks" "a power of two" "$work/n3.log"
if "${mpi[@]}" -np 4 "$shamn" train "$config" "${sets[@]}" --set train.grad_accum=2 \
     --set "train.out_dir=\"$work/uneven\"" > "$work/uneven.log" 2>&1; then
  fail "4 ranks for 2 micro-batches were not refused"
fi
refused "uneven" "cannot be shared evenly by 4 ranks" "$work/uneven.log"
echo "mismatched data, 3 ranks and an uneven share: refused"
echo "PASS"
