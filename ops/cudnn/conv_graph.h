// Convolutions through cuDNN's graph ("backend") API, the route PyTorch takes
// by default (aten/src/ATen/native/cudnn/Conv_v8.cpp): one convolution node
// per graph, engine configurations from cuDNN's heuristics (mode A, then
// the fallback list), filtered as PyTorch does (ops/cudnn/conv_graph_policy.h:
// no down-converted inputs; no tensor-core engines for float32 unless cudnn
// allow_tf32; no non-deterministic ones under deterministic). Without cudnn
// benchmark: the first configuration whose plan builds and runs on the
// call's buffers (PyTorch's try_configs); with it: the fastest of the first
// eight plans that build (timed with CUDA events on the call's buffers). The
// plan is cached per ConvKey and per cuDNN handle (so never used by two
// threads at once; PyTorch keeps its plans thread_local for that reason),
// with every descriptor it was built from.
//
// Why: on an H100 the legacy API's algorithms ran ResNet-18's CIFAR convs up
// to 2.6x slower than PyTorch 2.11 does through this API; through it, minidl's
// convs match PyTorch's forward and are 1.03-1.51x faster forward+backward,
// and the ResNet-18 step went from 0.94x to 1.24x (bench/RESULTS.md,
// 2026-11-27). The default since that run, where it passed test_cuda_ops and
// test_cuda_blas_dnn with every convolution on this path;
// MINIDL_CUDNN_GRAPH=0 in the environment keeps to the legacy API (as
// PyTorch's TORCH_CUDNN_V8_API_DISABLED=1). Returning false (no engine
// configuration builds and runs, cuDNN refuses a descriptor, or a pointer is
// not 16-byte aligned) sends the call to the legacy API; a shape that finds
// no plan prints one "minidl warning:" line to stderr saying why. CUDA build
// only.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "minidl/ops/cudnn/conv_key.h"

namespace minidl::cudnn_conv {

// True unless MINIDL_CUDNN_GRAPH=0 (read once).
bool graph_api_enabled();

// y = conv(x, w) (beta 0), dx = conv_backward_data(w, dy), dw =
// conv_backward_filter(x, dy). `key` is the call's make_conv_key. False: not
// run (use the legacy API).
bool graph_forward(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* w, void* y);
bool graph_backward_data(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* w, const void* dy,
                         void* dx);
bool graph_backward_filter(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* dy,
                           void* dw);

// Cached plans of every handle (all directions; a failed search is cached
// too, as nullptr); clear for tests.
size_t conv_graph_cache_size();
void clear_conv_graph_cache();

// Calls of graph_* since the process started (all threads): run through the
// graph API, or sent to the legacy API. Lets a GPU test prove that the
// convolutions really took the graph path.
struct ConvGraphStats {
  int64_t graph_calls = 0, legacy_calls = 0;
};
ConvGraphStats conv_graph_stats();

}  // namespace minidl::cudnn_conv
