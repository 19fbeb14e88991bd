#!/usr/bin/env bash
# scripts/gpu-check.sh: the GPU tests and benchmarks on a lent H100/H200.
#
# Ran on an H100 on 2026-11-26 and 2026-11-27 (the results are in
# bench/RESULTS.md; the last full `all`, 2026-11-27 18:39, passed 35 of 35
# steps in 240 s). A call costs ~50 s to start. `scripts/gpu-check.sh all` is
# the one-call form: the tests, the benchmarks, then the profile. For a short
# rerun of what a change touched: GPU_CHECK_ONLY (a regex of step names),
# BENCH_SUITE=norms and PROFILE_START_BEFORE_S=0, as in RESULTS.md's calls 3-5.
#   scripts/gpu-check.sh profile-norms   # there: ncu's time and DRAM bytes of
#       every kernel of the norm benchmarks (norm-profile.tar.gz under $OUT).
#
#   scripts/gpu-check.sh prepare   # here (the CPU machine): builds the CUDA
#       configuration (sm_90) and packs the GPU test binaries, stripped, into
#       build-gpu-carry/bin.tar.xz, with the shared libraries the GPU machine
#       lacks (Gloo and its deps, libgomp, ...) in build-gpu-carry/lib
#       (ignored by git, carried by the device tool), then prints the command
#       to run there.
#   scripts/gpu-check.sh bench     # there: bench_gpu and bench/bench_gpu_torch.py
#       on the same GPU (and bench_gpu again with MINIDL_CUDNN_GRAPH=0 and with
#       the legacy norm kernels), the tables of ratios in bench-report.md under
#       $OUT (bench/gpu_report.py).
#   scripts/gpu-check.sh profile   # there: where a training step's GPU time
#       goes, per kernel, minidl next to PyTorch: Nsight Compute (ncu) around
#       2 steps of ResNet-18 and SmallNet (batch 128) on each side, summed by
#       kind of kernel (bench/gpu_kernel_report.py) into profile-report.md,
#       the raw exports in profile-raw.tar.gz under $OUT.
#       PROFILE_MEMORY_FORMAT=channels-last profiles both sides' channels-last
#       steps instead; PROFILE_MODELS="resnet18" only that model.
#   scripts/gpu-check.sh run       # there, via the device tool's `run` with
#       carry ["build-gpu-carry"]: finds cuDNN/cuBLAS/NCCL in the nvidia
#       Python wheels, runs every test binary, then the CUDA tests under
#       compute-sanitizer memcheck with PYTORCH_NO_CUDA_MEMORY_CACHING=1
#       (each block its own cudaMalloc, so out-of-bounds accesses are seen;
#       no --leak-check: the runtime keeps cuBLAS workspaces and streams for
#       the process on purpose), and writes gpu-check-summary.txt, a JSON
#       summary (gpu-check-summary.json) and gpu-check-logs.tar.gz (one log
#       per step) under $OUT: three files, as the tool returns at most 8.
#       Steps stop being started after GPU_CHECK_BUDGET_S (480) seconds.
#       CUDA graphs (issue 14): test_cuda_graph, a short train_cifar10 run
#       eager and with --cuda-graph whose final losses must agree, and
#       bench_gpu --suite graph (batch-32 step time, eager against replay) in
#       the summary. test_cuda_graph is not run under memcheck:
#       PYTORCH_NO_CUDA_MEMORY_CACHING=1 has no private pools.
#       DDP/SyncBN on CUDA (issue 15): test_cuda_dist_oracles (Gloo-on-CUDA
#       with 4 processes on the one GPU,
#       NCCL at world 1, world N and the NCCL timeout only with >= 2 GPUs),
#       and train_cifar10 under minidl-launch: --backend auto picks nccl for
#       one process per GPU and gloo for 2 processes sharing it. Not under
#       memcheck (forked ranks).
#
# Why binaries built here rather than a build there: the GPU machine has none
# of our Debian dependencies (Eigen, doctest, nlohmann-json, Gloo, ...) and
# compiling there spends device time (see ../shared/reference/gpu-device.md).
# A test that exits 77 there (no device seen) counts as a failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry=build-gpu-carry

prepare() {
  set -e
  local build=$root/build-cuda
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  # The tests that need a device; the CPU-only ones (*_math, registry,
  # caching allocator, strided index) ran here in make test and build-cuda.
  local tests=(test_cuda_ops test_cuda_ops_half test_cuda_runtime test_cuda_blas_dnn test_cuda_multi_tensor
               test_cuda_nccl test_cuda_grad_scaler test_cuda_graph test_cuda_dist_oracles test_cuda_sync_debug
               test_cuda_channels_last)
  cmake --build "$build" -j "${JOBS:-2}" --target "${tests[@]}" train_cifar10 amp_bn_demo bench_gpu minidl-launch
  rm -rf "${root:?}/$carry" && mkdir -p "$root/$carry/lib"
  local staging
  staging=$(mktemp -d) && mkdir "$staging/bin" "$staging/examples" "$staging/bench"
  for t in "${tests[@]}"; do
    strip -o "$staging/bin/$t" "$build/tests/$t"
  done
  strip -o "$staging/examples/train_cifar10" "$build/examples/train_cifar10"
  strip -o "$staging/examples/amp_bn_demo" "$build/examples/amp_bn_demo"
  strip -o "$staging/examples/minidl-launch" "$build/bin/minidl-launch"
  strip -o "$staging/bench/bench_gpu" "$build/bench/bench_gpu"
  # The CIFAR-10 subset for the training run (../shared does not travel).
  local data=$root/../shared/data/cifar10-subset
  if [ -f "$data/data_batch_1.bin" ]; then
    mkdir -p "$root/$carry/data" && cp "$data"/data_batch_*.bin "$data"/batches.meta.txt "$root/$carry/data/"
  fi
  # Shared libraries of the binaries except glibc's, the C++ runtime (newer
  # there), and CUDA's (the wheels provide them there).
  ldd "$staging"/bin/* "$staging"/examples/* "$staging"/bench/* | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
      libcuda.so*|libcudart*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) ;;
      *) cp -L "$lib" "$root/$carry/lib/" ;;
    esac
  done
  # Each stripped binary is ~21 MiB (libminidl and its sm_90 fatbin linked
  # in), ~250 MiB in all: over the device tool's 64 MiB for everything that
  # travels. Most of each binary is the same library: one xz stream with a
  # dictionary larger than the tar finds the copies (10 binaries: 10.6 MiB,
  # against ~35 MiB with xz's default 8 MiB dictionary; ~3 min on 2 cores,
  # 256 MiB to unpack); `run` unpacks them with Python's tarfile (python3 is
  # on the GPU machine, xz may not be).
  tar -C "$staging" -cf - bin examples bench | xz -T1 --lzma2=preset=6,dict=256MiB > "$root/$carry/bin.tar.xz"
  rm -rf "$staging"
  cp "$0" "$root/$carry/gpu-check.sh"
  du -sh "$root/$carry"
  local kib
  kib=$(du -sk "$root/$carry" | cut -f1)
  [ "$kib" -lt $((52 * 1024)) ] || { echo "gpu-check prepare: $carry is ${kib} KiB, too big to carry with the checkout (64 MiB in all)" >&2; exit 1; }
  echo "now, with the device tool: run(command='bash $carry/gpu-check.sh run', carry=['$carry'], timeout_s=540)"
  echo "and for the benchmarks:       run(command='bash $carry/gpu-check.sh bench', carry=['$carry'], timeout_s=400)"
  echo "and where a step's time goes:  run(command='bash $carry/gpu-check.sh profile', carry=['$carry'], timeout_s=300)"
}

# There: unpacks the binaries (sets $unpacked) and points LD_LIBRARY_PATH at
# the carried libraries and the nvidia wheels' (cuDNN, cuBLAS, NCCL).
here=$(cd "$(dirname "$0")" && pwd)  # the carry folder
out=${OUT:-$root/gpu-check-out}
unpacked=
setup_there() {
  [ -n "$unpacked" ] && return 0  # `all` runs several parts on one unpacking
  mkdir -p "$out"
  unpacked=$(mktemp -d)
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$here/bin.tar.xz" "$unpacked" || {
    echo "gpu-check: cannot unpack $here/bin.tar.xz" >&2; return 1; }
  local wheel_libs
  wheel_libs=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, "lib"))))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$here/lib:${wheel_libs}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
}

# There: bench_gpu and bench/bench_gpu_torch.py on the same device in the same
# call, then bench/gpu_report.py's table (bench-report.md under $OUT).
# Each benchmark program's time limit: BENCH_TIMEOUT_S, or less where the
# call's BENCH_DEADLINE_S (seconds since the script started) comes first.
bench_limit() {
  local limit=${BENCH_TIMEOUT_S:-200} left=$((${BENCH_DEADLINE_S:-100000} - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -lt 1 ] && limit=1
  echo "$limit"
}

bench() {
  setup_there || return 1
  local gpu
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  echo "== gpu-check bench $(date -u +%FT%TZ) on ${gpu:-no GPU}"
  rm -f "$out"/bench-*.jsonl
  # BENCH_SUITE (all, ops, norms, train): a shorter run of one suite on both sides.
  local suite=(--suite "${BENCH_SUITE:-all}")
  timeout "$(bench_limit)" "$unpacked/bench/bench_gpu" "${suite[@]}" > "$out/bench-minidl.jsonl" 2>&1
  echo "bench_gpu: exit $?"
  timeout "$(bench_limit)" python3 "$here/../bench/bench_gpu_torch.py" "${suite[@]}" > "$out/bench-torch.jsonl" 2>&1
  echo "bench_gpu_torch.py: exit $?"
  if [ -z "${BENCH_DEFAULT_ONLY:-}" ]; then  # BENCH_DEFAULT_ONLY: a short rerun, the two default runs alone
    MINIDL_CUDNN_GRAPH=0 timeout "$(bench_limit)" "$unpacked/bench/bench_gpu" "${suite[@]}" \
      > "$out/bench-minidl-legacy-conv.jsonl" 2>&1
    echo "bench_gpu (MINIDL_CUDNN_GRAPH=0): exit $?"
    # The norm kernels before the fused/shifted-sum ones, same call, same card.
    MINIDL_CUDA_NORM_KERNELS=legacy timeout "$(bench_limit)" "$unpacked/bench/bench_gpu" --suite norms \
      > "$out/bench-minidl-legacy-norms.jsonl" 2>&1
    echo "bench_gpu --suite norms (MINIDL_CUDA_NORM_KERNELS=legacy): exit $?"
    # LayerNorm's dx in a pass of its own (the default writes it inside the column pass since 2026-11-27).
    MINIDL_CUDA_NORM_KERNELS=separate-dx timeout "$(bench_limit)" "$unpacked/bench/bench_gpu" --suite norms \
      > "$out/bench-minidl-separate-dx-norms.jsonl" 2>&1
    echo "bench_gpu --suite norms (MINIDL_CUDA_NORM_KERNELS=separate-dx): exit $?"
    # (Until 2026-11-27 PyTorch ran here with TORCH_CUDNN_V8_API_DISABLED=1 too:
    # on cuDNN's legacy API its convs were 1.06-2.27x slower than minidl's on
    # it, so the gap to its default was the graph API's engines; bench/RESULTS.md.)
  fi
  report() { python3 "$here/../bench/gpu_report.py" "$out/$1" "$out/bench-torch.jsonl" --device "$gpu"; }
  { report bench-minidl.jsonl
    if [ -f "$out/bench-minidl-legacy-conv.jsonl" ]; then
      echo
      echo "minidl with MINIDL_CUDNN_GRAPH=0 (cuDNN's legacy API for convolutions) against PyTorch:"
      report bench-minidl-legacy-conv.jsonl
      echo
      echo "minidl's norms with MINIDL_CUDA_NORM_KERNELS=legacy (Welford, two passes) against PyTorch:"
      report bench-minidl-legacy-norms.jsonl
      echo
      echo "minidl's norms with MINIDL_CUDA_NORM_KERNELS=separate-dx (LayerNorm's dx in a pass of its own) against PyTorch:"
      report bench-minidl-separate-dx-norms.jsonl
    fi
  } | tee "$out/bench-report.md"
  # The device tool brings back at most 8 files: the raw lines as one archive.
  (cd "$out" && tar -czf bench-jsonl.tar.gz bench-*.jsonl) && rm -f "$out"/bench-*.jsonl
}

# There: the path of Nsight Compute's ncu, or a message naming the caller ($1) and status 1.
find_ncu() {
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
  [ -n "$ncu" ] || { echo "gpu-check $1: ncu (Nsight Compute) not found" >&2; return 1; }
  echo "$ncu"
}

# There: ncu records only the steps between the profiler markers of
# bench_gpu --suite profile and its PyTorch twin (after their warm-up and
# cuDNN's algorithm search); each kernel is replayed alone for its duration,
# caches and clocks left as they are.
profile() {
  setup_there || return 1
  local ncu gpu tmp report=$out/profile-report.md
  ncu=$(find_ncu profile) || return 1
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  tmp=$(mktemp -d)
  local ncu_args=(--profile-from-start off --metrics gpu__time_duration.sum --cache-control none --clock-control none
                  --target-processes all -f)
  echo "## Per-kernel GPU time of a training step on ${gpu:-no GPU} ($(date -u +%FT%TZ))" | tee "$report"
  local model side tag rc
  # PROFILE_MEMORY_FORMAT=channels-last: both sides' steps channels-last (core/memory_format.h).
  local fmt=${PROFILE_MEMORY_FORMAT:-contiguous}
  for model in ${PROFILE_MODELS:-resnet18 smallnet}; do
    tag=${model}_b128$([ "$fmt" = channels-last ] && echo _cl)
    timeout "${PROFILE_TIMEOUT_S:-150}" "$ncu" "${ncu_args[@]}" -o "$tmp/minidl_$tag" \
      "$unpacked/bench/bench_gpu" --suite profile --model "$model" --batch 128 --memory-format "$fmt" \
      > "$tmp/minidl_$tag.log" 2>&1
    echo "ncu bench_gpu $tag: exit $?"
    timeout "${PROFILE_TIMEOUT_S:-150}" "$ncu" "${ncu_args[@]}" -o "$tmp/pytorch_$tag" \
      python3 "$here/../bench/bench_gpu_torch.py" --suite profile --model "$model" --batch 128 --memory-format "$fmt" \
      > "$tmp/pytorch_$tag.log" 2>&1
    echo "ncu bench_gpu_torch.py $tag: exit $?"
    rc=0
    for side in minidl pytorch; do
      "$ncu" --import "$tmp/${side}_$tag.ncu-rep" --csv --page raw > "$tmp/${side}_$tag.csv" 2>> "$tmp/${side}_$tag.log" || rc=1
    done
    if [ $rc -eq 0 ]; then
      python3 "$here/../bench/gpu_kernel_report.py" --steps 2 --title "$model, batch 128, float32, $fmt (2 steps)" \
        "$tmp/minidl_$tag.csv" "$tmp/pytorch_$tag.csv" 2>&1 | tee -a "$report"
    else
      echo "gpu-check profile: $tag: ncu --import failed (logs in profile-raw.tar.gz)" | tee -a "$report"
    fi
  done
  tar -C "$tmp" -czf "$out/profile-raw.tar.gz" --exclude='*.ncu-rep' . && rm -rf "$tmp"
}

# There: per-kernel GPU time and DRAM bytes of the norm benchmarks (bench_gpu
# --suite norms, once with the default kernels and once with
# MINIDL_CUDA_NORM_KERNELS=separate-dx, and PyTorch's twin), one round each;
# ncu's raw CSVs in norm-profile.tar.gz under $OUT, read here (where each
# kernel falls short of the memory bandwidth).
profile_norms() {
  setup_there || return 1
  local ncu tmp
  ncu=$(find_ncu profile-norms) || return 1
  tmp=$(mktemp -d)
  local metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size
  metrics+=,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
  local args=(--metrics "$metrics" --cache-control none --clock-control none --csv --page raw)
  timeout 120 "$ncu" "${args[@]}" "$unpacked/bench/bench_gpu" --suite norms --rounds 1 > "$tmp/minidl.csv" 2> "$tmp/minidl.log"
  echo "ncu bench_gpu --suite norms: exit $?"
  MINIDL_CUDA_NORM_KERNELS=separate-dx timeout 120 "$ncu" "${args[@]}" "$unpacked/bench/bench_gpu" --suite norms \
    --rounds 1 > "$tmp/minidl-separate-dx.csv" 2> "$tmp/minidl-separate-dx.log"
  echo "ncu bench_gpu --suite norms (separate-dx): exit $?"
  timeout 150 "$ncu" "${args[@]}" python3 "$here/../bench/bench_gpu_torch.py" --suite norms --rounds 1 > "$tmp/pytorch.csv" \
    2> "$tmp/pytorch.log"
  echo "ncu bench_gpu_torch.py --suite norms: exit $?"
  wc -l "$tmp"/*.csv
  tar -C "$tmp" -czf "$out/norm-profile.tar.gz" . && rm -rf "$tmp"
}

run() {
  setup_there || return 1
  local bin=$unpacked/bin
  # The device tool brings back at most 8 files from $OUT: the per-step logs
  # go to one tarball at the end, beside the two summaries.
  local logs
  logs=$(mktemp -d)
  # One command may run 600 s and a lease has ~15 min in all: steps past the
  # deadline are not started (reported as SKIP, counted as failed).
  local deadline=$((SECONDS + ${GPU_CHECK_BUDGET_S:-480}))
  local summary=$out/gpu-check-summary.txt passed=0 failed=0
  : > "$summary"
  say() { echo "$*" | tee -a "$summary"; }
  say "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/   gpu: /' | tee -a "$summary"
  step() {  # step NAME TIMEOUT CMD...: passes on exit 0 only (77, "skipped", fails: a GPU is expected here)
    local name=$1 limit=$2; shift 2
    local log=$logs/$name.log start=$SECONDS rc left=$((deadline - SECONDS))
    # GPU_CHECK_ONLY (a bash regex): run only the steps whose names match
    # (a short rerun of what a fix touched; the others are not counted).
    if [ -n "${GPU_CHECK_ONLY:-}" ] && ! [[ $name =~ $GPU_CHECK_ONLY ]]; then return; fi
    if [ "$left" -lt 10 ]; then
      failed=$((failed + 1)); say "SKIP $name: no time left (GPU_CHECK_BUDGET_S)"
      json+=("{\"step\": \"$name\", \"exit\": -1, \"seconds\": 0}")
      return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    timeout "$limit" "$@" > "$log" 2>&1; rc=$?
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); say "PASS $name ($((SECONDS - start)) s)"
    else failed=$((failed + 1)); say "FAIL $name (exit $rc, $((SECONDS - start)) s): $(tail -n 3 "$log" | tr '\n' ' ')"; fi
    json+=("{\"step\": \"$name\", \"exit\": $rc, \"seconds\": $((SECONDS - start))}")
  }
  local json=()
  local t
  # test_cuda_dist_oracles forks up to 4 ranks, each with its own CUDA context: more time.
  for t in "$bin"/*; do
    case $(basename "$t") in test_cuda_dist_oracles) step "$(basename "$t")" 150 "$t" ;; *) step "$(basename "$t")" 90 "$t" ;; esac
  done
  # The convolutions again through cuDNN's legacy API (MINIDL_CUDNN_GRAPH=0;
  # the graph API, ops/cudnn/conv_graph.h, is the default), compared with the CPU as above.
  for t in test_cuda_ops test_cuda_blas_dnn; do
    step "legacy_conv_$t" 90 env MINIDL_CUDNN_GRAPH=0 "$bin/$t"
  done
  # The norm kernels as they ran on the H100 on 2026-11-26 (Welford statistics, two passes;
  # the shifted-sum statistics, the fused single-pass kernels, BatchNorm's
  # one-reduction backward sums and LayerNorm's tiled parameter gradients are
  # newer; the runs above test them): the op suite again on the old path.
  step legacy_norms_test_cuda_ops 90 env MINIDL_CUDA_NORM_KERNELS=legacy "$bin/test_cuda_ops"
  # And with LayerNorm's dx in a pass of its own (the default writes it inside the column pass).
  step separate_dx_norms_test_cuda_ops 90 env MINIDL_CUDA_NORM_KERNELS=separate-dx "$bin/test_cuda_ops"
  # CUDA graphs (train_cifar10 --cuda-graph): the same short run eager and
  # graphed (deterministic cuDNN, same seed and data order), their final train
  # losses compared, and the graphed run must have replayed (else the
  # comparison is eager against eager); then the batch-32
  # step time, eager against graph replay (bench_gpu --suite graph), into the summary.
  if [ -d "$here/data" ]; then
    local graph_run=(--data "$here/data" --model smallnet --width 0.5 --epochs 2 --batch-size 32 --lr 0.05
                     --schedule cosine --deterministic --device cuda --workers 4 --seed 3)
    step train_cifar10_eager_b32 90 "$unpacked/examples/train_cifar10" "${graph_run[@]}" --memory-format contiguous \
      --log-dir "$(mktemp -d)"
    step train_cifar10_cuda_graph 90 "$unpacked/examples/train_cifar10" "${graph_run[@]}" --memory-format contiguous \
      --cuda-graph --log-dir "$(mktemp -d)"
    step cuda_graph_loss_matches_eager 10 python3 -c '
import re, sys
loss = [float(re.findall(r"^epoch \d+/\d+: train loss ([0-9.]+)", open(f).read(), re.M)[-1]) for f in sys.argv[1:]]
replays = [int(n) for n in re.findall(r"^cuda graph: (\d+) replays", open(sys.argv[2]).read(), re.M)]
print("final train loss eager %.6f graph %.6f, %s graph replays" % (loss[0], loss[1], replays[-1] if replays else "no"))
sys.exit(0 if replays and replays[-1] > 0 and abs(loss[0] - loss[1]) <= 1e-3 * max(1.0, abs(loss[0])) else 1)' \
      "$logs/train_cifar10_eager_b32.log" "$logs/train_cifar10_cuda_graph.log"
    # Channels-last (NHWC activations, cuDNN's NHWC convolutions), the
    # default (--memory-format auto) for this BatchNorm net on CUDA: the same
    # run; other algorithms, so the loss only has to stay within 2% of eager's.
    step train_cifar10_channels_last 90 "$unpacked/examples/train_cifar10" "${graph_run[@]}" \
      --log-dir "$(mktemp -d)"
    step channels_last_loss_near_eager 10 python3 -c '
import re, sys
loss = [float(re.findall(r"^epoch \d+/\d+: train loss ([0-9.]+)", open(f).read(), re.M)[-1]) for f in sys.argv[1:]]
print("final train loss eager %.6f channels-last %.6f" % (loss[0], loss[1]))
auto_cl = re.search(r"^device: cuda.*channels-last activations.*--memory-format auto", open(sys.argv[2]).read(), re.M)
print("--memory-format auto chose channels-last" if auto_cl else "--memory-format auto did not choose channels-last")
sys.exit(0 if auto_cl and abs(loss[0] - loss[1]) <= 0.02 * max(1.0, abs(loss[0])) else 1)' \
      "$logs/train_cifar10_eager_b32.log" "$logs/train_cifar10_channels_last.log"
    for t in train_cifar10_eager_b32 train_cifar10_cuda_graph cuda_graph_loss_matches_eager \
             train_cifar10_channels_last channels_last_loss_near_eager; do
      tail -n 2 "$logs/$t.log" 2>/dev/null | sed "s/^/   $t: /" | tee -a "$summary"
    done
  fi
  # Issue 15: train_cifar10 under minidl-launch on the GPU. --backend auto must
  # pick nccl with one process per GPU, and gloo (CUDA tensors staged through
  # host memory) when 2 processes share the GPU; the shared run trains with
  # SyncBatchNorm and DDP over Gloo-on-CUDA. The oracles themselves (DDP,
  # SyncBN, uneven and empty ranks, Gloo-on-CUDA and NCCL) are
  # test_cuda_dist_oracles above.
  if [ -d "$here/data" ]; then
    local launch_run=(--data "$here/data" --limit-train 256 --limit-test 64 --width 0.25 --batch-size 32 --epochs 1
                      --workers 1)
    step train_launch_1gpu 60 "$unpacked/examples/minidl-launch" --nproc-per-node 1 "$unpacked/examples/train_cifar10" \
      "${launch_run[@]}" --device cuda --log-dir "$(mktemp -d)"
    step train_launch_1gpu_is_nccl 5 grep -q "backend nccl" "$logs/train_launch_1gpu.log"
    # Both ranks on cuda:0 (whatever the GPU count): auto must fall back to gloo.
    step train_launch_shared_gpu_syncbn 90 "$unpacked/examples/minidl-launch" --nproc-per-node 2 \
      "$unpacked/examples/train_cifar10" "${launch_run[@]}" --device cuda:0 --norm syncbatchnorm --log-dir "$(mktemp -d)"
    step train_launch_shared_gpu_is_gloo 5 grep -q "backend gloo (auto: 2 processes on this node all use cuda:0" \
      "$logs/train_launch_shared_gpu_syncbn.log"
    grep -h "ddp:" "$logs/train_launch_1gpu.log" "$logs/train_launch_shared_gpu_syncbn.log" 2>/dev/null \
      | sed 's/^/   train_launch: /' | tee -a "$summary"
  fi
  step bench_cuda_graph 120 "$unpacked/bench/bench_gpu" --suite graph --rounds 5
  grep '"op"' "$logs/bench_cuda_graph.log" 2>/dev/null | sed 's/^/   bench_cuda_graph: /' | tee -a "$summary"
  # make train's recipe on the GPU, then PyTorch's twin of it (bench/train_torch.py)
  # on the same device: accuracy and epoch time side by side.
  local recipe=(--width 0.5 --epochs 25 --batch-size 128 --lr 0.05 --warmup-epochs 1 --schedule cosine)
  if [ -d "$here/data" ]; then
    step train_cifar10_cuda 150 "$unpacked/examples/train_cifar10" --data "$here/data" --model smallnet "${recipe[@]}" \
      --device cuda --workers 4 --log-dir "$(mktemp -d)"
    step train_torch_cuda 150 python3 "$here/../bench/train_torch.py" --data "$here/data" "${recipe[@]}" --device cuda
    # Mixed precision on the GPU (the 16-bit CUDA kernels), 5 epochs each.
    local amp
    for amp in fp16 bf16; do
      step "train_cifar10_cuda_amp_$amp" 90 "$unpacked/examples/train_cifar10" --data "$here/data" --model smallnet \
        --width 0.5 --epochs 5 --batch-size 128 --lr 0.05 --warmup-epochs 1 --device cuda --amp "$amp" \
        --log-dir "$(mktemp -d)"
    done
    for t in train_cifar10_cuda train_torch_cuda train_cifar10_cuda_amp_fp16 train_cifar10_cuda_amp_bf16; do
      tail -n 4 "$logs/$t.log" 2>/dev/null | sed "s/^/   $t: /" | tee -a "$summary"
    done
    # The AMP and BatchNorm demo in float16 on the GPU (opt levels' memory and
    # time, underflow without a scale, the scaler's history, accuracy); its
    # tables and checks are in the log.
    step amp_bn_demo_cuda 150 "$unpacked/examples/amp_bn_demo" --device cuda --data "$here/data" --out "$(mktemp -d)" \
      --threads 4
    grep -E "^   (O[0-3]|level) |FAILED|^total" "$logs/amp_bn_demo_cuda.log" 2>/dev/null | sed "s/^/   amp_bn_demo: /" |
      tee -a "$summary"
  fi
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$sanitizer" ]; then
    # The tests that launch kernels, the cross-backend suite first (the
    # budget may end the list); *_math and registry run on the CPU only.
    local name
    for name in test_cuda_ops test_cuda_ops_half test_cuda_runtime test_cuda_blas_dnn test_cuda_multi_tensor \
                test_cuda_grad_scaler test_cuda_nccl; do
      [ -x "$bin/$name" ] || continue
      step "memcheck_$name" 240 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
        "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 1 "$bin/$name"
      # Shared-memory races: the reductions (CUB) and the norm kernels are in the op suite.
      [ "$name" = test_cuda_ops ] && step "racecheck_$name" 240 "$sanitizer" --tool racecheck --error-exitcode 1 "$bin/$name"
    done
  else
    failed=$((failed + 1)); say "FAIL memcheck: compute-sanitizer not found"
    json+=("{\"step\": \"memcheck\", \"exit\": 127, \"seconds\": 0}")
  fi
  say "$passed passed, $failed failed"
  tar -C "$logs" -czf "$out/gpu-check-logs.tar.gz" . && rm -rf "$logs"
  { echo "{\"passed\": $passed, \"failed\": $failed, \"steps\": ["
    local i; for i in "${!json[@]}"; do echo "  ${json[$i]}$([ "$i" -lt $((${#json[@]} - 1)) ] && echo ,)"; done
    echo "]}"; } > "$out/gpu-check-summary.json"
  [ $failed -eq 0 ]
}

# There, one call for a whole lease (a machine is given back 30 s after a
# call, and a new one costs a minute of device time to start): the tests with
# GPU_CHECK_BUDGET_S (default 300 s here), the benchmarks until 430 s after
# the start (BENCH_DEADLINE_S), then the profile if it can start before 440 s;
# 7 files under $OUT (~4.5 min on an H100 on 2026-11-27). The call:
# run(command='bash build-gpu-carry/gpu-check.sh all', carry=['build-gpu-carry'], timeout_s=600).
all() {
  local rc
  GPU_CHECK_BUDGET_S=${GPU_CHECK_BUDGET_S:-300} run; rc=$?
  BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-100} BENCH_DEADLINE_S=${BENCH_DEADLINE_S:-430} bench
  # The profile (about 60 s on an H100) where time is left.
  if [ "$SECONDS" -lt "${PROFILE_START_BEFORE_S:-440}" ]; then PROFILE_TIMEOUT_S=${PROFILE_TIMEOUT_S:-40} profile; fi
  return $rc
}

case ${1:-} in
  prepare) prepare ;;
  all) all ;;
  run) run ;;
  bench) bench ;;
  profile) profile ;;
  profile-norms) profile_norms ;;
  *) echo "usage: $0 prepare|all|run|bench|profile|profile-norms (see the comment at the top)" >&2; exit 2 ;;
esac
