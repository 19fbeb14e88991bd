#!/usr/bin/env bash
# make test-install: minidl as another project sees it.
#  1. `cmake --install` the build tree (default build/) into a fresh prefix;
#     examples/consumer finds it with find_package(minidl), builds, trains
#     (alone and as 2 ranks under the installed minidl-launch); its compile
#     flags must have no -march=native and no include path into minidl's
#     sources (the source root, core/, ...), its link line no library of the
#     build tree.
#  2. Every installed header compiles against the installed tree alone (no
#     installed header includes one that is not installed); the package
#     reports its components; COMPONENTS cuda fails clearly on a build without
#     CUDA, and an unknown component fails.
#  3. examples/consumer with add_subdirectory(minidl's sources): builds the
#     library only (no minidl tests), and trains. FetchContent of this
#     checkout's HEAD configures the same way (configure only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
jobs=${JOBS:-$(nproc)}
work=$build/install-test
prefix=$work/prefix
rm -rf "$prefix" "$work/consumer" "$work/checks" "$work/fail" "$work/fetch" "$work/subdir" "$root/build-subproject"
mkdir -p "$work"
fail() { echo "test-install: FAILED: $*" >&2; exit 1; }
step() { echo "== test-install: $*"; }
quiet() { local log=$work/last.log; "$@" > "$log" 2>&1 || { cat "$log"; fail "$*"; }; }

# A consumer target's compile flags (CMakeFiles/<target>.dir/flags.make of the
# Makefile generator): no -march=native, no include path into minidl's tree.
check_flags() {  # $1: flags.make, $2: what
  [ -s "$1" ] || fail "$2: no $1"
  ! grep -q -- '-march=native' "$1" || fail "$2: -march=native reached the consumer ($1)"
  grep -q '^CXX_INCLUDES' "$1" || fail "$2: no CXX_INCLUDES in $1"
  while read -r dir; do
    dir=${dir%/}
    case "$dir" in
      "$root"|"$root"/core|*/core|*/nn|*/ops|*/optim|*/data|*/models|*/dist)
        fail "$2: include path $dir leaks minidl's source layout" ;;
      "$prefix"/*|"$root"/build-subproject/include) ;;  # the installed tree; the subproject's include/
      "$root"/*) fail "$2: include path $dir points into minidl's tree" ;;
    esac
  done < <(sed -n 's/^CXX_INCLUDES = //p' "$1" | grep -oE '(-I|-isystem )[^ ]+' | sed -E 's/^(-I|-isystem )//')
}
gen=(-G "Unix Makefiles")

step "install into $prefix"
quiet cmake --install "$build" --prefix "$prefix"
[ -f "$prefix/include/minidl/minidl.h" ] && [ -f "$prefix/include/minidl/core/tensor.h" ] || fail "headers not installed"
[ ! -e "$prefix/include/minidl/ops/cpu" ] || fail "ops/cpu (kernel internals) installed"
[ -x "$prefix/bin/minidl-launch" ] || fail "minidl-launch not installed"

# The library is compiled with -march=native, consumers are not: no installed
# header may have types whose layout depends on the ISA (Eigen's fixed-size
# types, SIMD vectors, over-alignment). Eigen not being on the consumer's
# include path, the header check below would also catch an Eigen include.
if grep -rnE '#include <(Eigen/|[a-z0-9]*intrin\.h|arm_neon\.h)|__m(128|256|512)|alignas|EIGEN_' "$prefix/include/minidl"; then
  fail "installed headers with ISA-dependent types (above): keep them in .cpp files or ops/cpu/"
fi

step "find_package route: examples/consumer against $prefix"
quiet cmake -S "$root/examples/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${gen[@]}"
quiet cmake --build "$work/consumer" -j "$jobs"
check_flags "$work/consumer/CMakeFiles/consumer.dir/flags.make" "find_package consumer"
link=$work/consumer/CMakeFiles/consumer.dir/link.txt
grep -q "$prefix/lib/libminidl.a" "$link" || fail "consumer does not link the installed libminidl.a ($link)"
! grep -q "$build/libminidl.a" "$link" || fail "consumer links the build tree's library ($link)"
out=$(OMP_NUM_THREADS=1 "$work/consumer/consumer") || fail "consumer: $out"
echo "   consumer: $out"
out=$(OMP_NUM_THREADS=1 "$prefix/bin/minidl-launch" --nproc-per-node 2 "$work/consumer/consumer") ||
  fail "consumer under minidl-launch: $out"
echo "   consumer, 2 ranks under the installed minidl-launch: $out"

step "every installed header, against the installed tree alone; components"
mkdir -p "$work/checks"
# core/cuda/*.h need CUDA's headers: a CUDA build installs them and they are
# compiled apart, with CUDA::cudart (a consumer's route); a CPU build must not
# install them.
(cd "$prefix/include" && find minidl -name '*.h' ! -path 'minidl/core/cuda/*' | sort | sed 's/.*/#include "&"/') \
  > "$work/checks/all_headers.cpp"
: > "$work/checks/cuda_headers.cpp"
if [ -d "$prefix/include/minidl/core/cuda" ]; then
  (cd "$prefix/include" && find minidl/core/cuda -name '*.h' | sort | sed 's/.*/#include "&"/') > "$work/checks/cuda_headers.cpp"
fi
# The README's "C++ API in 15 lines" as a user pastes it (it once lacked <iostream>).
awk '/^## The C\+\+ API in 15 lines/ {f = 1} f && /^```cpp/ {c = 1; next} c && /^```/ {exit} c' "$root/README.md" \
  > "$work/checks/readme_quickstart.cpp"
[ -s "$work/checks/readme_quickstart.cpp" ] || fail "README.md: no cpp block under 'The C++ API in 15 lines'"
cat > "$work/checks/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(minidl_install_checks LANGUAGES CXX)
find_package(minidl REQUIRED OPTIONAL_COMPONENTS cuda)
list(JOIN minidl_FOUND_COMPONENTS "," components)
message(STATUS "minidl components: ${components} | dist ${minidl_dist_FOUND} | cuda ${minidl_cuda_FOUND}")
add_library(all_headers OBJECT all_headers.cpp)
target_link_libraries(all_headers PRIVATE minidl::minidl)
add_executable(readme_quickstart readme_quickstart.cpp)
target_link_libraries(readme_quickstart PRIVATE minidl::minidl)
if(minidl_cuda_FOUND)
  add_library(cuda_headers OBJECT cuda_headers.cpp)
  target_link_libraries(cuda_headers PRIVATE minidl::minidl CUDA::cudart)
endif()
CMAKE
quiet cmake -S "$work/checks" -B "$work/checks/build" -DCMAKE_PREFIX_PATH="$prefix" "${gen[@]}"
cuda=$(grep -q 'MINIDL_CUDA:BOOL=ON' "$build/CMakeCache.txt" && echo TRUE || echo FALSE)
components=$(sed -n 's/.*-- minidl components: \(.*\)/\1/p' "$work/last.log")
case $cuda in
  TRUE) [ "$components" = "dist,cuda | dist TRUE | cuda TRUE" ] || fail "components: got '$components', want dist,cuda" ;;
  FALSE) [ "$components" = "dist | dist TRUE | cuda FALSE" ] || fail "components: got '$components', want dist only" ;;
esac
echo "   components: $components"
quiet cmake --build "$work/checks/build" -j "$jobs"
check_flags "$work/checks/build/CMakeFiles/all_headers.dir/flags.make" "header check"
echo "   $(wc -l < "$work/checks/all_headers.cpp") installed headers compile"
out=$(OMP_NUM_THREADS=1 "$work/checks/build/readme_quickstart") || fail "the README's 15-line example: $out"
echo "   the README's 15-line example builds and runs: $(echo "$out" | head -1)"
case $cuda in
  TRUE) [ -s "$work/checks/cuda_headers.cpp" ] || fail "CUDA build: core/cuda/*.h not installed"
        echo "   $(wc -l < "$work/checks/cuda_headers.cpp") core/cuda headers compile with CUDA::cudart" ;;
  FALSE) [ ! -s "$work/checks/cuda_headers.cpp" ] || fail "CPU build installed core/cuda/*.h (they need CUDA's headers)" ;;
esac

# find_package(minidl REQUIRED COMPONENTS $1) must fail saying $2.
expect_failure() {
  mkdir -p "$work/fail/$1"
  printf 'cmake_minimum_required(VERSION 3.22)\nproject(f LANGUAGES CXX)\nfind_package(minidl REQUIRED COMPONENTS %s)\n' "$1" \
    > "$work/fail/$1/CMakeLists.txt"
  if cmake -S "$work/fail/$1" -B "$work/fail/$1/build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/fail/$1.log" 2>&1; then
    fail "find_package(minidl REQUIRED COMPONENTS $1) succeeded"
  fi
  # CMake reflows the message: compare with the whitespace collapsed.
  local message
  message=$(sed -n '/Reason given by package:/,/Configuring incomplete/p' "$work/fail/$1.log" |
            tr -s ' \n' ' ' | sed 's/.*Reason given by package: //; s/ *-- Configuring incomplete.*//')
  [[ $message == *"$2"* ]] || { cat "$work/fail/$1.log"; fail "COMPONENTS $1: the error does not say '$2'"; }
  echo "   COMPONENTS $1 fails: $message"
}
[ $cuda = FALSE ] && expect_failure cuda "configured with -DMINIDL_CUDA=ON"
expect_failure tensorflow "unknown component 'tensorflow'"

step "add_subdirectory route: examples/consumer with minidl's sources"
# minidl's build goes to $root/build-subproject: one level below the root as
# build/, so its compile commands are build/'s (paths relative to ccache's
# base_dir) and the library comes from the cache, not a 15-minute compile.
quiet cmake -S "$root/examples/consumer" -B "$work/subdir" -DCMAKE_BUILD_TYPE=Release \
  -DMINIDL_SOURCE_DIR="$root" -DMINIDL_BINARY_DIR="$root/build-subproject" "${gen[@]}"
! cmake --build "$work/subdir" --target help | grep -qE 'test_|minidl_test_main|bench_|train_cifar10' ||
  fail "add_subdirectory builds minidl's tests, examples or benchmarks"
quiet cmake --build "$work/subdir" -j "$jobs" --target consumer
# The consumer's flags (minidl's own sources are compiled with -march=native, on purpose).
check_flags "$work/subdir/CMakeFiles/consumer.dir/flags.make" "add_subdirectory consumer"
out=$(OMP_NUM_THREADS=1 "$work/subdir/consumer") || fail "add_subdirectory consumer: $out"
echo "   consumer: $out"
# FetchContent is add_subdirectory of a fetched copy: configure only (the
# build is the one above), from this checkout's committed HEAD.
if head=$(git -C "$root" rev-parse HEAD 2>/dev/null); then
  step "FetchContent route (configure only): minidl at $head"
  mkdir -p "$work/fetch"
  cat > "$work/fetch/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(minidl_fetch_check LANGUAGES CXX)
include(FetchContent)
FetchContent_Declare(minidl GIT_REPOSITORY ${MINIDL_GIT} GIT_TAG ${MINIDL_COMMIT})
FetchContent_MakeAvailable(minidl)
if(NOT TARGET minidl::minidl OR NOT TARGET minidl::minidl-launch)
  message(FATAL_ERROR "FetchContent: no minidl::minidl or minidl::minidl-launch")
endif()
if(TARGET minidl_test_main OR TARGET train_cifar10 OR TARGET bench_ops)
  message(FATAL_ERROR "FetchContent: minidl's tests, examples or benchmarks are configured")
endif()
add_executable(consumer ${CONSUMER_MAIN})
target_link_libraries(consumer PRIVATE minidl::minidl)
CMAKE
  quiet cmake -S "$work/fetch" -B "$work/fetch/build" -DMINIDL_GIT="$root" -DMINIDL_COMMIT="$head" \
    -DCONSUMER_MAIN="$root/examples/consumer/main.cpp" "${gen[@]}"
  echo "   configured: minidl::minidl, no tests"
else
  echo "== test-install: FetchContent route skipped: $root is not a git checkout"
fi
echo "test-install: OK"
