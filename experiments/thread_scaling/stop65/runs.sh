#!/usr/bin/env bash
# The device runs of stop 65 (experiments/thread_scaling.md, runs 10-12), from
# the repository root: bash experiments/thread_scaling/stop65/runs.sh 10|11|12.
# build-dev2/dev.tar.xz holds the stripped binaries old/ A/ B/ AB/ (shamn,
# bench_head_pieces) and lib/ (their shared libraries), built on the
# development VM; outputs go to $OUT.
set -u
run=$1
D=/tmp/d; mkdir -p $D && tar xJf build-dev2/dev.tar.xz -C $D
export LD_LIBRARY_PATH=$D/lib
R=$OUT/r$run; mkdir -p $R
trap 'tar czf $OUT/r$run.tgz -C $OUT r$run && rm -rf $R' EXIT
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $OUT/log$run.txt; }
lscpu > $R/lscpu.txt
pieces() {  # variant tag
  $D/$1/bench_head_pieces 16 > $R/pieces_$2.txt 2>&1; log "pieces $1: $(tail -1 $R/pieces_$2.txt)"
}
machine() {  # threads
  $D/B/shamn --threads $1 machine --json > $R/machine_t$1.json; log "machine$1 $(grep -A2 f32_fma $R/machine_t$1.json | tr -d '\n ')"
}
train() {  # variant threads steps name
  rm -rf $D/run
  $D/$1/shamn --threads $2 train configs/default.toml --set "data.train_path=\"$S/train.bin\"" --set "data.val_path=\"$S/val.bin\"" \
    --set 'data.tokenizer=""' --set train.max_steps=$3 --set optim.warmup_steps=1 --set optim.lr=3e-4 --set optim.min_lr=3e-4 \
    --set train.eval_every=1000000 --set train.eval_batches=1 --set train.checkpoint_every=1000000 --set log.every=1 \
    --set 'log.progress="never"' --set "train.out_dir=\"$D/run\"" --profile --machine $R/machine_t$2.json > $R/$4.txt 2>&1
  cp $D/run/metrics.jsonl $R/$4.metrics.jsonl 2>/dev/null
  log "$4: $(grep -o 'median [0-9]* tok/s' $R/$4.txt) | $(grep '^step:' $R/$4.txt)"
}
S=$D/synth
case $run in
  10)  # four binaries in turn, twice: the pieces, then the step at 16 threads; then 1 and 8 threads
    for r in 1 2; do for v in old A B AB; do pieces $v ${v}_r$r; done; done
    $D/B/shamn synthetic --out $S --vocab 32000 --successors 64 --tokens 8000000 > /dev/null
    machine 16
    for r in 1 2; do for v in old A B AB; do train $v 16 5 train_${v}_t16_r$r; done; done
    machine 1; train B 1 3 train_B_t1
    machine 8; train B 8 4 train_B_t8 ;;
  11)  # B and old interleaved, alternating which goes first; 1 thread with the FMA peak before and after
    i=0; for v in B old old B; do i=$((i + 1)); pieces $v ${v}_$i; done
    $D/B/shamn synthetic --out $S --vocab 32000 --successors 64 --tokens 8000000 > /dev/null
    machine 16
    i=0; for v in B old old B B old old B; do i=$((i + 1)); train $v 16 5 train_${v}_t16_$i; done
    machine 1; train B 1 3 train_B_t1_a; train old 1 3 train_old_t1_b
    $D/B/shamn --threads 1 machine --json > $R/machine_t1_after.json ;;
  12)  # B at 8, 4, 2 and 1 thread
    $D/B/shamn synthetic --out $S --vocab 32000 --successors 64 --tokens 8000000 > /dev/null
    for t in 8 4 2 1; do machine $t; done
    train B 8 4 train_B_t8; train B 4 4 train_B_t4; train B 2 3 train_B_t2; train B 1 3 train_B_t1_c ;;
esac
log done
