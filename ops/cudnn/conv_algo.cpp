// cuDNN algorithm choice and its per-key cache (the policy: ops/cudnn/conv_algo.h).
// One search routine serves the three directions through a traits struct
// naming each direction's perf type and cuDNN calls.
#include "minidl/ops/cudnn/conv_algo.h"

#include <algorithm>
#include <vector>

#include "minidl/core/cuda/graph.h"
#include "minidl/core/tensor.h"

namespace minidl::cudnn_conv {

namespace {

// The largest workspace a benchmark search may use: more than any sane conv
// needs, small enough not to evict everything the caching allocator holds.
constexpr size_t kMaxBenchmarkWorkspace = size_t{1} << 30;
// Benchmark searches per new shape (see search()).
constexpr int kFindRounds = 3;

struct ForwardTraits {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static constexpr const char* kOp = "conv (cuDNN forward)";
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvDescriptors& d, Perf* p, int n, int* got) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), n, got, p);
  }
  // a: x, b: w, out: y
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescriptors& d, const void* a, const void* b, void* out,
                            Perf* p, int n, int* got, void* ws, size_t ws_size) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, d.x.get(), a, d.w.get(), b, d.conv.get(), d.y.get(), out, n,
                                                  got, p, ws, ws_size);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, int algo, size_t* size) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                   static_cast<Algo>(algo), size);
  }
};

struct BackwardDataTraits {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static constexpr const char* kOp = "conv (cuDNN backward data)";
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvDescriptors& d, Perf* p, int n, int* got) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), n, got, p);
  }
  // a: w, b: dy, out: dx
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescriptors& d, const void* a, const void* b, void* out,
                            Perf* p, int n, int* got, void* ws, size_t ws_size) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), a, d.y.get(), b, d.conv.get(), d.x.get(), out,
                                                       n, got, p, ws, ws_size);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, int algo, size_t* size) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                        static_cast<Algo>(algo), size);
  }
};

struct BackwardFilterTraits {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static constexpr const char* kOp = "conv (cuDNN backward filter)";
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvDescriptors& d, Perf* p, int n, int* got) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), n, got,
                                                         p);
  }
  // a: x, b: dy, out: dw
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescriptors& d, const void* a, const void* b, void* out,
                            Perf* p, int n, int* got, void* ws, size_t ws_size) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), a, d.y.get(), b, d.conv.get(), d.w.get(),
                                                         out, n, got, p, ws, ws_size);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, int algo, size_t* size) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                          static_cast<Algo>(algo), size);
  }
};

ConvAlgoCache<AlgoChoice>& cache() {
  static ConvAlgoCache<AlgoChoice> c;
  return c;
}

// Math type a chosen entry runs with: float32 without TF32 stays on FMA math
// whatever the entry reports (it must never pick up tensor-core TF32).
cudnnMathType_t run_math(cudnnMathType_t reported, DType dtype, bool allow_tf32) {
  if (dtype == DType::Float32 && !allow_tf32) return CUDNN_FMA_MATH;
  return reported;
}

// Workspace for a benchmark search: the most any algorithm asks for (capped);
// if the allocator cannot give it, no workspace (Find then only times the
// algorithms that need none).
Tensor benchmark_workspace(int device, size_t max_bytes_of_any) {
  const size_t bytes = std::min(max_bytes_of_any, kMaxBenchmarkWorkspace);
  if (bytes == 0) return Tensor();
  try {
    return empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(Device(DeviceType::CUDA, device)));
  } catch (const Error&) {
    return Tensor();
  }
}

// The usable entries, best first (both cuDNN calls rank their results).
template <class Traits>
std::vector<AlgoChoice> search(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* a,
                               const void* b, void* out) {
  using Perf = typename Traits::Perf;
  d.conv.set_math(requested_math(d.dtype, key.allow_tf32));
  std::vector<Perf> perfs(Traits::kCount);
  int got = 0;
  if (key.benchmark) {
    cuda::check_not_capturing(cuda::current_stream(key.device),
                              "a cuDNN benchmark search (cudnnFind*) for a new convolution shape",
                              "it times kernels and synchronizes; run a warm-up step before capturing");
    size_t most = 0;
    for (int algo = 0; algo < Traits::kCount; ++algo) {
      size_t s = 0;
      if (Traits::workspace(h, d, algo, &s) == CUDNN_STATUS_SUCCESS) most = std::max(most, s);
    }
    const Tensor ws = benchmark_workspace(key.device, most);
    const size_t ws_bytes = ws.defined() ? static_cast<size_t>(ws.numel()) : 0;
    // A Find times each algorithm once, and one timing can be far off: on an
    // H100 one of two runs kept a forward algorithm 4x slower than the
    // other's choice for the same shape. So: kFindRounds Finds, each (algo,
    // math) entry keeps its best time, ranked again.
    std::vector<Perf> best, round(Traits::kCount);
    for (int r = 0; r < kFindRounds; ++r) {
      int n = 0;
      MINIDL_CUDNN_CHECK(Traits::find(h, d, a, b, out, round.data(), Traits::kCount, &n,
                                      ws.defined() ? ws.raw_data() : nullptr, ws_bytes));
      for (int i = 0; i < n; ++i) {
        const Perf& p = round[static_cast<size_t>(i)];
        if (p.status != CUDNN_STATUS_SUCCESS) continue;
        const auto same = std::find_if(best.begin(), best.end(), [&](const Perf& q) {
          return q.algo == p.algo && q.mathType == p.mathType;
        });
        if (same == best.end()) best.push_back(p);
        else if (p.time < same->time) same->time = p.time;
      }
    }
    std::stable_sort(best.begin(), best.end(), [](const Perf& x, const Perf& y) { return x.time < y.time; });
    std::copy(best.begin(), best.end(), perfs.begin());
    got = static_cast<int>(best.size());
  } else {
    MINIDL_CUDNN_CHECK(Traits::heuristic(h, d, perfs.data(), Traits::kCount, &got));
  }
  std::vector<AlgoChoice> usable;
  for (int i = 0; i < got; ++i) {
    const Perf& p = perfs[static_cast<size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    if (key.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    AlgoChoice c;
    c.algo = static_cast<int>(p.algo);
    c.math = run_math(p.mathType, d.dtype, key.allow_tf32);
    d.conv.set_math(c.math);
    if (Traits::workspace(h, d, c.algo, &c.workspace) != CUDNN_STATUS_SUCCESS) continue;
    usable.push_back(c);
  }
  MINIDL_CHECK(!usable.empty(), Traits::kOp, ": cuDNN offers no usable algorithm for input ",
               shape_str(Shape(key.x_sizes.begin(), key.x_sizes.begin() + d.shape.nd())), ", weight ",
               shape_str(Shape(key.w_sizes.begin(), key.w_sizes.begin() + d.shape.nd())), ", dtype ",
               dtype_name(d.dtype), key.deterministic ? " with backends::cudnn::deterministic set" : "");
  return usable;
}

Tensor allocate_workspace(size_t bytes, int device) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(Device(DeviceType::CUDA, device)));
}

// A cached choice, or the first candidate whose workspace the caching
// allocator can give (as PyTorch: an algorithm that would run out of memory
// gives way to the next best, and that one is cached).
template <class Traits>
ChosenAlgo choose(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* a, const void* b,
                  void* out) {
  if (const auto hit = cache().find(key)) {
    d.conv.set_math(hit->math);
    return {*hit, allocate_workspace(hit->workspace, key.device)};
  }
  const std::vector<AlgoChoice> candidates = search<Traits>(h, d, key, a, b, out);
  for (size_t i = 0; i < candidates.size(); ++i) {
    Tensor ws;
    try {
      ws = allocate_workspace(candidates[i].workspace, key.device);
    } catch (const Error&) {
      if (i + 1 == candidates.size()) throw;  // the last one: report the allocator's error
      continue;
    }
    const AlgoChoice stored = cache().insert(key, candidates[i]);
    d.conv.set_math(stored.math);
    if (stored.algo == candidates[i].algo && stored.math == candidates[i].math) return {stored, ws};
    return {stored, allocate_workspace(stored.workspace, key.device)};  // another thread's insert won
  }
  MINIDL_ASSERT(false, "unreachable: search() returns at least one candidate");
}

}  // namespace

cudnnMathType_t requested_math(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::Float32: return allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    case DType::Float16:
    case DType::BFloat16: return CUDNN_TENSOR_OP_MATH;
    default: return CUDNN_DEFAULT_MATH;
  }
}

ChosenAlgo choose_forward(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* x, const void* w,
                          void* y) {
  return choose<ForwardTraits>(h, d, key, x, w, y);
}

ChosenAlgo choose_backward_data(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* w,
                                const void* dy, void* dx) {
  return choose<BackwardDataTraits>(h, d, key, w, dy, dx);
}

ChosenAlgo choose_backward_filter(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* x,
                                  const void* dy, void* dw) {
  return choose<BackwardFilterTraits>(h, d, key, x, dy, dw);
}

size_t conv_algo_cache_size() { return cache().size(); }
void clear_conv_algo_cache() { cache().clear(); }

}  // namespace minidl::cudnn_conv
