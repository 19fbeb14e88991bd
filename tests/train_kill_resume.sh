#!/usr/bin/env bash
# examples/train_cifar10 killed with SIGKILL at a random moment of the epoch
# after a checkpoint, then --resume'd, again and again (each resumed run is
# killed too): the final model must equal, bit for bit, an uninterrupted
# run's. The checkpoint is committed by renaming checkpoint.json over the old
# one after the model and optimizer files are fsync'ed and renamed, so
# whatever the kill interrupts, the last committed epoch loads. A kill rarely
# lands inside the few-millisecond checkpoint write itself here;
# tests/test_checkpoint_kill.cpp aims at exactly that.
# usage: train_kill_resume.sh TRAIN_CIFAR10 DATA_DIR WORK_DIR
set -uo pipefail
train=$1 data=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
common=(--data "$data" --limit-train 256 --limit-test 64 --width 0.125 --batch-size 32 --epochs 10 --threads 1
        --workers 0 --lr 0.05 --schedule cosine)

timeout 300 "$train" "${common[@]}" --log-dir "$work/straight" --save-final "$work/straight.safetensors" \
  > "$work/straight.log" 2>&1 || { echo "FAILED: the uninterrupted run"; tail "$work/straight.log"; exit 1; }

ckpt=$work/ckpt
kills=0
for attempt in 1 2 3 4 5 6 7 8; do
  resume=()
  [ -f "$ckpt/checkpoint.json" ] && resume=(--resume "$ckpt")
  # Not under timeout(1): $! must be train_cifar10 itself, or the SIGKILL would hit
  # the wrapper and leave the run going (and racing the next one in $ckpt).
  "$train" "${common[@]}" --log-dir "$work/killed" --checkpoint-dir "$ckpt" "${resume[@]}" \
    --save-final "$work/resumed.safetensors" > "$work/run$attempt.log" 2>&1 &
  pid=$!
  # Wait until this run has written a checkpoint of its own (checkpoint.json newer than the start).
  marker=$work/start$attempt && touch "$marker"
  for _ in $(seq 6000); do  # at most 60 s; then it is killed all the same
    [ "$ckpt/checkpoint.json" -nt "$marker" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  if ! kill -0 "$pid" 2>/dev/null; then  # it finished all epochs before the kill
    wait "$pid" || { echo "FAILED: run $attempt exited non-zero"; tail "$work/run$attempt.log"; exit 1; }
    break
  fi
  # 10-99 ms: into the next epoch (~0.1 s each at this size on one thread),
  # sometimes into its checkpoint; a longer wait lets fast machines finish.
  sleep "0.0$((RANDOM % 90 + 10))"
  if kill -KILL "$pid" 2>/dev/null; then
    kills=$((kills + 1))
    wait "$pid" 2>/dev/null
    echo "run $attempt killed; committed: $(grep -m1 -o '"epoch": [0-9]*' "$ckpt/checkpoint.json")"
  else  # it finished just before the kill
    wait "$pid" || { echo "FAILED: run $attempt exited non-zero"; tail "$work/run$attempt.log"; exit 1; }
    break
  fi
done
if [ ! -f "$work/resumed.safetensors" ]; then  # still killed on the last attempt: finish the run
  timeout 300 "$train" "${common[@]}" --log-dir "$work/killed" --checkpoint-dir "$ckpt" --resume "$ckpt" \
    --save-final "$work/resumed.safetensors" > "$work/final.log" 2>&1 ||
    { echo "FAILED: the final resume"; tail "$work/final.log"; exit 1; }
fi
echo "$kills SIGKILLs"
[ "$kills" -ge 1 ] || { echo "FAILED: no run was killed (the runs are too short to hit)"; exit 1; }
cmp "$work/straight.safetensors" "$work/resumed.safetensors" ||
  { echo "FAILED: killed and resumed $kills times != uninterrupted"; exit 1; }
echo "killed $kills times and resumed: identical to the uninterrupted run (bit for bit)"
