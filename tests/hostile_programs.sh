#!/usr/bin/env bash
# Every bundled program, given what a new user gives it by mistake: a missing
# file, a short file, a directory where a file belongs, a broken or foreign
# checkpoint, a bad flag or number. Each must exit 1 (a runtime error) or 2 (a
# usage error), never 0 and never die from a signal (134 = abort, an exception
# that escaped main), and its message must name the problem (the file, the flag).
# usage: hostile_programs.sh WORK_DIR DATA_DIR, with the programs' paths in
# TRAIN, BN_TOOLS, DDP_MINIMAL, GRAD_ACC, SYNCBN_FIX, BN_TRAIN_EVAL, AMP_BN_DEMO, LAUNCH,
# BENCH_TRAIN, BENCH_OPS, BENCH_DDP, BENCH_CONV, UNET3D, MAKE_GRAIN, QUICKSTART, BN_BY_HAND,
# CUSTOM_FUNCTION.
set -uo pipefail
work=$1 data=$2
rm -rf "$work" && mkdir -p "$work"
failures=0

# expect CODE "SUBSTRING" PROGRAM ARGS...: runs it (60 s at most) and checks the exit code and stderr.
expect() {
  local code=$1 want=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1 >/dev/null)
  rc=$?
  local name
  name=$(basename "$1")
  if [ "$rc" -ne "$code" ]; then
    echo "FAIL: $name ${*:2}: exit $rc, expected $code; stderr: $out"
    failures=$((failures + 1))
  elif [[ "$out" != *"$want"* ]]; then
    echo "FAIL: $name ${*:2}: exit $rc as expected, but stderr lacks '$want': $out"
    failures=$((failures + 1))
  else
    echo "ok:   $name ${*:2} -> $rc: $(echo "$out" | tail -1 | cut -c1-160)"
  fi
}

# Hostile data: a missing folder, a short file, a directory named like a file.
missing=$work/no_such_dir
short=$work/short && mkdir -p "$short"
for i in 1 2 3 4 5; do cp "$data/data_batch_$i.bin" "$short/"; done
head -c 10000 "$data/data_batch_1.bin" > "$short/data_batch_1.bin"  # 3 records and 781 bytes
cp "$data/data_batch_1.bin" "$short/test_batch.bin"
dirs=$work/dirs && mkdir -p "$dirs/data_batch_1.bin"
base=(--limit-train 64 --limit-test 32 --batch-size 32 --epochs 1 --threads 1)
small=("${base[@]}" --width 0.125 --workers 0)

echo "--- train_cifar10"
expect 1 "$missing/data_batch_1.bin" "$TRAIN" --data "$missing" "${small[@]}" --log-dir "$work/logs"
expect 1 "$short/data_batch_1.bin: size 10000 is not a whole number of 3073-byte records" \
  "$TRAIN" --data "$short" "${small[@]}" --log-dir "$work/logs"
expect 1 "$dirs/data_batch_1.bin is a directory" \
  "$TRAIN" --data "$dirs" --train-files data_batch_1.bin --test-files data_batch_1.bin "${small[@]}" --log-dir "$work/logs"
expect 1 "$short/data_batch_1.bin" "$TRAIN" --data "$short" "${base[@]}" --width 0.125 --workers 2 --log-dir "$work/logs"
expect 2 "--epochs" "$TRAIN" --epochs abc
expect 2 "--epochs" "$TRAIN" --epochs -3
expect 2 "--lr: expected a positive number, got nan" "$TRAIN" --data "$data" "${small[@]}" --lr nan --log-dir "$work/logs"
# CLI11's own check said "Value 0 not in range 0.000000 to 1797693134862315708...": 0 seemed in range.
expect 2 "--epochs: expected a positive number, got 0" "$TRAIN" --epochs 0
expect 2 "--weight-decay: expected a number >= 0, got -0.1" "$TRAIN" --weight-decay -0.1
expect 2 "--batch-size: expected a number, got '12x'" "$TRAIN" --batch-size 12x
expect 2 "--epochs: expected a number, got 99999999999999999999: out of range" \
  "$TRAIN" --epochs 99999999999999999999  # was: INT64_MAX epochs, training without end
expect 2 "--bogus" "$TRAIN" --bogus
expect 2 "--limit-train" "$TRAIN" --limit-train -5   # was: silently all images
expect 2 "--stop-after" "$TRAIN" --stop-after -1
expect 1 "set_num_threads: expected 1 to 1024 threads, got 100000" \
  "$TRAIN" --data "$data" --limit-train 64 --epochs 1 --width 0.125 --threads 100000 --log-dir "$work/logs"  # was: SIGSEGV
expect 2 "--model" "$TRAIN" --model resnet9000
expect 1 "no checkpoint at $missing" "$TRAIN" --data "$data" "${small[@]}" --resume "$missing" --log-dir "$work/logs"

# Checkpoints: a real one, then broken and foreign ones.
ckpt=$work/ckpt wide=$work/ckpt_wide
if ! timeout 120 "$TRAIN" --data "$data" "${small[@]}" --checkpoint-dir "$ckpt" --log-dir "$work/logs" >/dev/null 2>&1 ||
   ! timeout 120 "$TRAIN" --data "$data" "${base[@]}" --width 0.25 --workers 0 --checkpoint-dir "$wide" --log-dir "$work/logs" >/dev/null 2>&1; then
  echo "FAIL: could not make the checkpoints the next cases need"
  exit 1
fi
expect 1 "cannot resume from $ckpt/checkpoint.json: train_cifar10: the checkpoint was made with --width 0.125" \
  "$TRAIN" --data "$data" "${base[@]}" --width 0.25 --workers 0 --resume "$ckpt" --log-dir "$work/logs"
foreign=$work/foreign && cp -r "$ckpt" "$foreign"
cp "$wide/model_epoch1.safetensors" "$foreign/model_epoch1.safetensors"  # another network's weights
expect 1 "$foreign/model_epoch1.safetensors: Error(s) in loading state_dict" \
  "$TRAIN" --data "$data" "${small[@]}" --resume "$foreign" --log-dir "$work/logs"
expect 1 "size mismatch for conv1.weight: copying a param with shape torch.Size([16, 3, 3, 3]) from checkpoint, the shape in current model is torch.Size([8, 3, 3, 3])" \
  "$TRAIN" --data "$data" "${small[@]}" --resume "$foreign" --log-dir "$work/logs"
broken=$work/broken && cp -r "$ckpt" "$broken"
head -c 40 "$ckpt/checkpoint.json" > "$broken/checkpoint.json"
expect 1 "cannot resume from $broken/checkpoint.json: [json.exception.parse_error" \
  "$TRAIN" --data "$data" "${small[@]}" --resume "$broken" --log-dir "$work/logs"
truncated=$work/truncated && cp -r "$ckpt" "$truncated"
head -c 100 "$ckpt/model_epoch1.safetensors" > "$truncated/model_epoch1.safetensors"
expect 1 "load_safetensors: $truncated/model_epoch1.safetensors: header length" \
  "$TRAIN" --data "$data" "${small[@]}" --resume "$truncated" --log-dir "$work/logs"
expect 1 "the checkpoint was made with --norm (not given), this run has --norm groupnorm" \
  "$TRAIN" --data "$data" "${small[@]}" --norm groupnorm --resume "$ckpt" --log-dir "$work/logs"  # was: "--norm " and nothing
unet_ckpt=$work/unet_ckpt
unet_small=(--threads 1 --epochs 1 --generate 1 --generate-val 1 --volume-size 16 --patch 16 --base-width 4 --batch-size 1)
if ! timeout 120 "$UNET3D" "${unet_small[@]}" --data "$work/unet_data" --log-dir "$work/unet" --checkpoint-dir "$unet_ckpt" \
     >/dev/null 2>&1; then
  echo "FAIL: could not make the train_unet3d checkpoint the next cases need"
  exit 1
fi
# Each program given the other's checkpoint (was: "--dataset off" and "key 'base_width' not found", no file named).
expect 1 "train_cifar10: cannot resume from $unet_ckpt/checkpoint.json: it is a checkpoint of train_unet3d" \
  "$TRAIN" --data "$data" "${small[@]}" --resume "$unet_ckpt" --log-dir "$work/logs"
expect 1 "train_unet3d: cannot resume from $ckpt/checkpoint.json: it is a checkpoint of train_cifar10" \
  "$UNET3D" "${unet_small[@]}" --data "$work/unet_data" --log-dir "$work/unet" --resume "$ckpt"
echo "--- predict_unet3d"
unet_val=$work/unet_data/val
expect 1 "predict_unet3d: no checkpoint at $missing" \
  "$PREDICT_UNET3D" --checkpoint "$missing" --images "$unet_val/images" --out "$work/pred"
expect 1 "predict_unet3d: cannot load $ckpt/checkpoint.json: it is a checkpoint of train_cifar10" \
  "$PREDICT_UNET3D" --checkpoint "$ckpt" --images "$unet_val/images" --out "$work/pred"
expect 1 "--images $missing/images does not exist" \
  "$PREDICT_UNET3D" --checkpoint "$unet_ckpt" --images "$missing/images" --out "$work/pred"
expect 1 "--out $unet_val/images is the folder of the input" \
  "$PREDICT_UNET3D" --checkpoint "$unet_ckpt" --images "$unet_val/images" --out "$unet_val/images"
expect 1 "--roi 12 is not a multiple of 8 (the network pools 3 times)" \
  "$PREDICT_UNET3D" --checkpoint "$unet_ckpt" --images "$unet_val/images" --out "$work/pred" --roi 12
if [ -e "$work/pred" ]; then  # each refused before predicting: no --out folder left behind
  echo "FAIL: predict_unet3d left $work/pred behind after refusing its input"
  failures=$((failures + 1))
fi
expect 1 "$missing/000.npy" \
  "$PREDICT_UNET3D" --checkpoint "$unet_ckpt" --images "$unet_val/images" --out "$work/pred" --labels "$missing"
expect 1 "--expect-dice needs --labels" \
  "$PREDICT_UNET3D" --checkpoint "$unet_ckpt" --images "$unet_val/images" --out "$work/pred" --expect-dice 0.5
expect 2 "--overlap" "$PREDICT_UNET3D" --checkpoint "$unet_ckpt" --images "$unet_val/images" --out "$work/pred" --overlap 1
expect 2 "--checkpoint is required" "$PREDICT_UNET3D" --images "$unet_val/images" --out "$work/pred"
dirckpt=$work/dirckpt && mkdir -p "$dirckpt/checkpoint.json"
expect 1 "cannot resume from $dirckpt/checkpoint.json: is a directory" \
  "$TRAIN" --data "$data" "${small[@]}" --resume "$dirckpt" --log-dir "$work/logs"

echo "--- bn_tools"
expect 1 "cannot open $missing/data_batch_1.bin: no such file" "$BN_TOOLS" "$missing/data_batch_1.bin"
expect 1 "$short/data_batch_1.bin holds fewer than 256 images" "$BN_TOOLS" "$short/data_batch_1.bin"
expect 1 "cannot open $dirs/data_batch_1.bin: is a directory" "$BN_TOOLS" "$dirs/data_batch_1.bin"
expect 2 "expected at most one argument" "$BN_TOOLS" a b
expect 2 "unknown option '--bogus'" "$BN_TOOLS" --bogus  # was: "cannot open --bogus", exit 1

echo "--- programs without arguments (were: the argument ignored, exit 0)"
expect 2 "quickstart: error: unexpected argument '--bogus': it takes none" "$QUICKSTART" --bogus
expect 2 "bn_by_hand: error: unexpected argument '--epochs': it takes none" "$BN_BY_HAND" --epochs 3
expect 2 "custom_function: error: unexpected argument 'x': it takes none" "$CUSTOM_FUNCTION" x

echo "--- ddp_minimal"
expect 1 "$missing/data_batch_1.bin" "$DDP_MINIMAL" "$missing"
expect 1 "$short/data_batch_1.bin: size 10000" "$DDP_MINIMAL" "$short"
expect 2 "EPOCHS: expected an integer, got 'two'" "$DDP_MINIMAL" "$data" two
expect 2 "EPOCHS: expected a positive number, got 0" "$DDP_MINIMAL" "$data" 0

echo "--- grad_accumulation_bn, syncbn_fix, bn_train_eval"
expect 1 "$missing/data_batch_1.bin" "$GRAD_ACC" --data "$missing/data_batch_1.bin"
expect 1 "$dirs/data_batch_1.bin is a directory" "$GRAD_ACC" --data "$dirs/data_batch_1.bin"
expect 2 "--bogus" "$GRAD_ACC" --bogus
expect 1 "syncbn_fix runs under the launcher" "$SYNCBN_FIX" --smoke
expect 2 "--steps" "$SYNCBN_FIX" --steps abc
expect 1 "$missing/data_batch_1.bin" "$BN_TRAIN_EVAL" --smoke --data "$missing" --out "$work/bte"
expect 1 "$short/data_batch_1.bin: size 10000" "$BN_TRAIN_EVAL" --smoke --data "$short" --out "$work/bte"
expect 2 "--epochs" "$BN_TRAIN_EVAL" --epochs 1.5

echo "--- amp_bn_demo"
expect 1 "$missing/data_batch_1.bin" "$AMP_BN_DEMO" --smoke --data "$missing" --out "$work/abd"
expect 1 "$short/data_batch_1.bin: size 10000" "$AMP_BN_DEMO" --smoke --data "$short" --out "$work/abd"
expect 2 "--epochs" "$AMP_BN_DEMO" --epochs 1.5

echo "--- train_unet3d, make_grain_dataset"
mine=$work/my_volumes && mkdir -p "$mine" && printf 'x' > "$mine/scan.npy"
expect 1 "$mine holds scan.npy but neither train/images nor images/" \
  "$UNET3D" --data "$mine" --epochs 1 --log-dir "$work/unet"  # was: grain volumes written next to it, trained, exit 0
[ -e "$mine/train" ] && { echo "FAIL: train_unet3d wrote into $mine"; failures=$((failures + 1)); }
expect 1 "$mine/scan.npy is a file" "$UNET3D" --data "$mine/scan.npy" --epochs 1 --log-dir "$work/unet"
expect 2 "--patch: expected a positive number, got 0" "$UNET3D" --patch 0
expect 2 "--out is required" "$MAKE_GRAIN" --count 2  # was: exit 106
expect 2 "--count: expected a positive number, got 0" "$MAKE_GRAIN" --out "$work/grains" --count 0  # was: exit 105
if [ -z "${ASAN_OPTIONS:-}" ]; then  # AddressSanitizer's allocator aborts on a request of terabytes
  expect 1 "make_grain_dataset: error: make_grain_volume: out of memory for a volume of (100000, 100000, 100000)" \
    "$MAKE_GRAIN" --out "$work/grains" --count 1 --size 100000  # was: "std::bad_alloc"
else
  echo "skip: make_grain_dataset --size 100000 under AddressSanitizer"
fi

echo "--- minidl-launch with a program that fails on bad data"
expect 1 "ddp_minimal: error: CIFAR10: cannot open $missing/data_batch_1.bin" "$LAUNCH" --nproc-per-node 2 "$DDP_MINIMAL" "$missing"
expect 125 "minidl-launch: cannot execute '$missing/prog': No such file or directory" "$LAUNCH" "$missing/prog"

echo "--- benchmarks"
expect 2 "--batch: expected an integer, got 'big'" "$BENCH_TRAIN" --batch big
expect 2 "--threads: expected an integer, got 'x'" "$BENCH_OPS" --threads x
expect 2 "--reps: expected an integer, got '3x'" "$BENCH_DDP" --reps 3x
expect 2 "--threads: expected an integer, got ''" "$BENCH_CONV" --threads ""
expect 1 "unknown model" "$BENCH_TRAIN" --model nosuchnet --batch 2 --reps 1

# --help: the usage on stdout, exit 0, at once (before: some programs took
# "--help" for a data folder, the benchmarks ignored it and ran for minutes).
echo "--- --help"
for prog in "$TRAIN" "$BN_TOOLS" "$DDP_MINIMAL" "$GRAD_ACC" "$SYNCBN_FIX" "$BN_TRAIN_EVAL" "$AMP_BN_DEMO" "$LAUNCH" \
            "$BENCH_TRAIN" "$BENCH_OPS" "$BENCH_DDP" "$BENCH_CONV" "$UNET3D" "$MAKE_GRAIN" "$QUICKSTART" "$BN_BY_HAND" \
            "$CUSTOM_FUNCTION"; do
  out=$(timeout 20 "$prog" --help 2>/dev/null)
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -qi "usage" <<<"$out"; then
    echo "FAIL: $(basename "$prog") --help: exit $rc, stdout: $(head -c 200 <<<"$out")"
    failures=$((failures + 1))
  else
    echo "ok:   $(basename "$prog") --help -> 0: $(head -1 <<<"$out" | cut -c1-100)"
  fi
done

if [ "$failures" -ne 0 ]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases behaved"
