#!/usr/bin/env bash
# Two "nodes" on one machine: two minidl-launch invocations with --nnodes 2
# (node ranks 0 and 1), two processes each, rendezvous on 127.0.0.1, training
# train_cifar10 data-parallel over 4 ranks with SyncBatchNorm. Passes when both
# launchers exit 0, rank 0 reports 4 processes, and SyncBN's running statistics
# are identical on all 4 ranks.
# usage: train_two_nodes.sh LAUNCHER TRAIN_CIFAR10 DATA_DIR WORK_DIR
set -uo pipefail
launch=$1 train=$2 data=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
args=(--data "$data" --limit-train 512 --limit-test 128 --width 0.125 --batch-size 16 --epochs 1
      --threads 1 --workers 0 --norm syncbatchnorm --log-dir "$work/logs")

# A port nothing listens on (bash's /dev/tcp connect fails).
for _ in $(seq 50); do
  port=$((20000 + RANDOM % 20000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done

timeout 300 "$launch" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
  "$train" "${args[@]}" > "$work/node1.log" 2>&1 &
node1=$!
timeout 300 "$launch" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
  "$train" "${args[@]}" > "$work/node0.log" 2>&1
rc0=$?
wait "$node1"
rc1=$?
echo "--- node 0 (exit $rc0)"; grep -v "%" "$work/node0.log" | tail -12
echo "--- node 1 (exit $rc1)"; tail -5 "$work/node1.log"
[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || { echo "FAILED: a launcher exited non-zero"; exit 1; }
grep -q "ddp:   4 processes" "$work/node0.log" || { echo "FAILED: rank 0 did not see 4 processes"; exit 1; }
grep -q "largest difference: running_mean 0, running_var 0" "$work/node0.log" ||
  { echo "FAILED: SyncBN running statistics differ across ranks"; exit 1; }
echo "PASSED"
