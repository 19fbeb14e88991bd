// Convolutions through cuDNN's graph ("backend") API, the route PyTorch takes
// by default (aten/src/ATen/native/cudnn/Conv_v8.cpp): one convolution node
// per graph, engine configurations from cuDNN's heuristics (mode A, then
// the fallback list), filtered as PyTorch does (no down-converted inputs; no
// tensor-core engines for float32 unless cudnn allow_tf32; no
// non-deterministic ones under deterministic), then the first that builds an
// execution plan, or with cudnn benchmark on the fastest of the first eight
// (timed with CUDA events on the call's buffers). The plan is cached per
// ConvKey with every descriptor it was built from.
//
// Why: on an H100 the legacy API's algorithms ran ResNet-18's CIFAR convs up
// to 2x slower than PyTorch 2.11 does through this API (bench/RESULTS.md).
//
// EXPERIMENTAL, opt-in: MINIDL_CUDNN_GRAPH=1 in the environment. Compiled,
// not run on a GPU yet; the legacy API (conv.cpp) stays the default until
// this has passed tests/test_cuda_ops on a GPU. Returning false (no engine
// configuration applies, or a pointer is not 16-byte aligned) sends the call
// to the legacy API. CUDA build only.
#pragma once

#include <cudnn.h>

#include "minidl/ops/cudnn/conv_key.h"

namespace minidl::cudnn_conv {

// MINIDL_CUDNN_GRAPH=1 (read once).
bool graph_api_enabled();

// y = conv(x, w) (beta 0), dx = conv_backward_data(w, dy), dw =
// conv_backward_filter(x, dy). `key` is the call's make_conv_key. False: not
// run (use the legacy API).
bool graph_forward(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* w, void* y);
bool graph_backward_data(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* w, const void* dy,
                         void* dx);
bool graph_backward_filter(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* dy,
                           void* dw);

// Cached plans (all directions; a failed build is cached too); clear for tests.
size_t conv_graph_cache_size();
void clear_conv_graph_cache();

}  // namespace minidl::cudnn_conv
