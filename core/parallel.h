// Thread count of the CPU kernels (OpenMP, Eigen's GEMM included). It starts
// from MINIDL_NUM_THREADS, else OMP_NUM_THREADS, else the number of cores.
#pragma once

namespace minidl {

int get_num_threads();
void set_num_threads(int n);  // as torch.set_num_threads

// Applies MINIDL_NUM_THREADS once; called by the first kernel lookup.
void init_num_threads_from_env();

}  // namespace minidl
