// Thread count of the CPU kernels (OpenMP, Eigen's GEMM included). It starts
// from MINIDL_NUM_THREADS, else OMP_NUM_THREADS, else the number of cores.
#pragma once

namespace minidl {

int get_num_threads();
// As torch.set_num_threads; n must be in 1..kMaxThreads.
void set_num_threads(int n);

// libgomp starts a team with a stack allocation per thread, so a team of
// ~100,000 threads overflows the main thread's stack (SIGSEGV in
// GOMP_parallel); far fewer already only cost time. 1024 is more hardware
// threads than nearly any single machine has.
constexpr int kMaxThreads = 1024;

// Applies MINIDL_NUM_THREADS once; called by the first kernel lookup.
void init_num_threads_from_env();

}  // namespace minidl
