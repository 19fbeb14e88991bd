# The two commands of the README: `make test` (and, once training lands, `make train`).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

.PHONY: bench-gpu deps build build-cuda test test-install compile-other-isa test-sanitize fuzz bench bench-avx2 clean train train-build-cuda

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# minidl as another project uses it: installs the Release build into
# $(BUILD)/install-test/prefix, builds examples/consumer against it with
# find_package and again with add_subdirectory, runs both, checks that no
# -march=native or source path reaches the consumer (scripts/test-install.sh).
test-install: build
	JOBS=$(JOBS) bash scripts/test-install.sh $(BUILD)

# Trains SmallNet (half width: 32-64-128-256 channels) on CIFAR-10 with the
# CPU's cores. Data: data/cifar-10-batches-bin (the official binary release)
# if present, else the shared 5,085-image subset (train on batches 1-4, test
# on 5: 2-4 minutes on 2 cores, 70.0% test accuracy on a Zen 4 EPYC on
# 2026-11-27), else the official release downloaded
# and MD5-checked by scripts/get-cifar10.sh (the full 50,000 images take ~12x
# longer per epoch), else Fashion-MNIST from Debian's dataset-fashion-mnist
# package. Override with TRAIN_ARGS="--epochs 30 ...";
# RESUME=1 continues from the last checkpoint.
# With an NVIDIA GPU (nvidia-smi lists one) and the CUDA toolkit (nvcc), it
# builds train_cifar10 in the CUDA configuration (build-cuda, for the GPU's
# own architecture) and trains on the GPU (train_cifar10's --device auto; the
# 25 epochs take 3-4 s on an H100); TRAIN_DEVICE=cpu keeps to the CPU build.
HAVE_GPU ?= $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo 1)
TRAIN_ON_GPU := $(if $(filter cpu,$(TRAIN_DEVICE)),,$(and $(HAVE_GPU),$(NVCC)))
TRAIN_BUILD := $(if $(TRAIN_ON_GPU),build-cuda,$(BUILD))
TRAIN_DIR ?= runs/train_cifar10
TRAIN_ARGS ?= --model smallnet --width 0.5 --epochs 25 --batch-size 128 --lr 0.05 --warmup-epochs 1 \
              --schedule cosine --workers 2
train: $(if $(TRAIN_ON_GPU),train-build-cuda,build)
	@if [ -f data/cifar-10-batches-bin/data_batch_1.bin ]; then data="--data data/cifar-10-batches-bin"; \
	elif [ -f ../shared/data/cifar10-subset/data_batch_1.bin ]; then data="--data ../shared/data/cifar10-subset"; \
	elif bash scripts/get-cifar10.sh data; then data="--data data/cifar-10-batches-bin"; \
	elif [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || \
	     bash scripts/install-deps.sh dataset-fashion-mnist; then \
	  echo "CIFAR-10 could not be downloaded (see above); training on Fashion-MNIST from Debian's package instead"; \
	  data="--dataset fashion-mnist"; \
	else echo "no data: put CIFAR-10's binary release in data/cifar-10-batches-bin" \
	  "or apt-get install dataset-fashion-mnist" >&2; exit 1; fi; \
	echo "logs: $(TRAIN_DIR)/ (metrics.csv, curves.svg, TensorBoard: tensorboard --logdir $(TRAIN_DIR))"; \
	echo "checkpoints: $(TRAIN_DIR)/checkpoints (an interrupted run continues with: make train RESUME=1)"; \
	$(TRAIN_BUILD)/examples/train_cifar10 $$data $(TRAIN_ARGS) --log-dir $(TRAIN_DIR) \
	  --checkpoint-dir $(TRAIN_DIR)/checkpoints $(if $(RESUME),--resume $(TRAIN_DIR)/checkpoints)

train-build-cuda: deps
	@echo "make train: an NVIDIA GPU and nvcc found: building train_cifar10 with CUDA in build-cuda (TRAIN_DEVICE=cpu for the CPU)"
	cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC) \
	  -DCMAKE_CUDA_ARCHITECTURES=native $(CMAKE_FLAGS)
	cmake --build build-cuda -j $(JOBS) --target train_cifar10

# The CUDA configuration (library, tests, examples), compiled and linked,
# then its GPU tests (ctest -L cuda): without a device each reports itself
# skipped with the reason (exit 77), so this needs nvcc, not a GPU. For a lent
# GPU machine, scripts/gpu-check.sh prepares the GPU tests here and runs them there.
build-cuda: deps
	@if [ -z "$(NVCC)" ]; then echo "build-cuda: skipped: no nvcc found (install the CUDA toolkit)"; exit 0; fi; \
	cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC) $(CMAKE_FLAGS) && \
	cmake --build build-cuda -j $(JOBS) && \
	cd build-cuda && ctest -L cuda --verbose -j $(JOBS)  # verbose: a skip prints its reason

# Compiles, never runs, the CPU kernels for the x86 level this machine lacks:
# AVX-512 (Sapphire Rapids: BF16, FP16, AMX) on an AVX2-only CPU, AVX2
# (x86-64-v3) on an AVX-512 one; `make test` builds the other. Each level has
# its own kernel code (tile sizes, intrinsics), and a change tested on AVX2
# machines alone once broke every AVX-512 build unseen.
OTHER_ISA ?= $(if $(shell grep -m1 -ow avx512f /proc/cpuinfo 2>/dev/null),x86-64-v3,sapphirerapids)
compile-other-isa: deps
	cmake -S . -B build-isa-$(OTHER_ISA) -DCMAKE_BUILD_TYPE=Release -DMINIDL_NATIVE=OFF \
	  -DCMAKE_CXX_FLAGS="-march=$(OTHER_ISA)" $(CMAKE_FLAGS)
	cmake --build build-isa-$(OTHER_ISA) -j $(JOBS) --target minidl test_conv2d_winograd

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
test-sanitize: deps
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g1" -DMINIDL_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# libFuzzer targets (fuzz/fuzz_*.cpp) for every parser of outside bytes,
# built with clang (ASan + UBSan) in build-fuzz: only the library and the
# targets. Each runs FUZZ_SECONDS over a copy of its seed corpus
# (fuzz/corpus/<target>/); any crash fails and leaves the input in
# build-fuzz/fuzz-artifacts/.
FUZZ_SECONDS ?= 10
fuzz: deps
	@bash scripts/install-deps.sh --fuzz
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g1" \
	  -DMINIDL_FUZZ=ON $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS)
	bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# Side-by-side benchmark with PyTorch (needs `python3 -m pip install torch`).
bench: build
	python3 bench/run_bench.py --build $(BUILD) --suites ops,norm,train
	python3 bench/run_bench_dist.py --build $(BUILD)
	python3 bench/run_bench_ddp.py --build $(BUILD)
	@$(MAKE) --no-print-directory bench-gpu

# The GPU benchmarks (bench/bench_gpu.cpp next to bench/bench_gpu_torch.py on
# the same GPU): skipped, with a line saying why, without a CUDA build or GPU.
bench-gpu:
	@if [ ! -x build-cuda/bench/bench_gpu ]; then echo "bench-gpu: skipped: no build-cuda/bench/bench_gpu (make build-cuda first)"; exit 0; fi; \
	build-cuda/bench/bench_gpu > build-cuda/bench-gpu-minidl.jsonl; rc=$$?; \
	if [ $$rc -eq 77 ]; then cat build-cuda/bench-gpu-minidl.jsonl; exit 0; fi; [ $$rc -eq 0 ] || exit $$rc; \
	python3 bench/bench_gpu_torch.py > build-cuda/bench-gpu-torch.jsonl && \
	python3 bench/gpu_report.py build-cuda/bench-gpu-minidl.jsonl build-cuda/bench-gpu-torch.jsonl \
	  --device "$$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"

# The same comparison for CPUs without AVX-512: minidl built for x86-64-v3
# (AVX2 + FMA, no -march=native) in build-avx2, PyTorch's kernels limited to
# AVX2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2). Runs on any AVX2 machine.
bench-avx2: deps
	cmake -S . -B build-avx2 -DCMAKE_BUILD_TYPE=Release -DMINIDL_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=x86-64-v3" \
	  -DMINIDL_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build build-avx2 -j $(JOBS) --target bench_ops bench_norm bench_train
	python3 bench/run_bench.py --build build-avx2 --suites ops,norm,train --isa avx2

clean:
	rm -rf $(BUILD) build-sanitize build-cuda build-subproject build-fuzz build-avx2 build-isa-*
