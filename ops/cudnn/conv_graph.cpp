// See conv_graph.h. Compiled, not run on a GPU.
#include "minidl/ops/cudnn/conv_graph.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "minidl/core/cuda/graph.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/cudnn/backend_descriptor.h"
#include "minidl/ops/cudnn/descriptors.h"

namespace minidl::cudnn_conv {

namespace {

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';
constexpr int kMaxTimedPlans = 8;
constexpr int kTimedRuns = 3;

// A plan with everything it was built from (kept alive with it).
struct GraphPlan {
  std::vector<BackendDescriptor> parts;  // tensors, convolution, operation, graph, engine config
  BackendDescriptor plan;
  int64_t workspace = 0;
};

// nullptr: no plan for this key (the legacy API runs it).
ConvAlgoCache<std::shared_ptr<const GraphPlan>>& cache() {
  static ConvAlgoCache<std::shared_ptr<const GraphPlan>> c;
  return c;
}

// Every cuDNN 9 accepts the handle on the graph and the plan; 9.x marks
// these attribute names deprecated in favour of a device-properties
// descriptor that older 9.x libraries lack.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

BackendDescriptor tensor(int64_t uid, const std::array<int64_t, 5>& sizes, int nd, DType dtype) {
  BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<int64_t, 5> strides = contiguous_strides(sizes, nd);
  const cudnnDataType_t type = data_type(dtype, "conv (cuDNN graph)");
  const int64_t alignment = 16;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, sizes.data(), nd);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), nd);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
  MINIDL_CUDNN_CHECK(t.finalize());
  return t;
}

BackendDescriptor convolution(const ConvShape& s, DType dtype) {
  BackendDescriptor c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t comp = compute_type(dtype);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = s.spatial;
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp);
  c.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
  c.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &dims);
  c.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, s.pad.data(), dims);
  c.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, s.pad.data(), dims);
  c.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, s.dilation.data(), dims);
  c.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, s.stride.data(), dims);
  MINIDL_CUDNN_CHECK(c.finalize());
  return c;
}

// The attribute names of one direction's operation node.
struct OpNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OpNames op_names(ConvDirection d) {
  switch (d) {
    case ConvDirection::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDirection::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDirection::BackwardFilter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  MINIDL_ASSERT(false, "unreachable: every ConvDirection is handled");
}

bool has_note(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t n) {
  return std::find(notes.begin(), notes.end(), n) != notes.end();
}

// The numerical notes of an engine configuration's engine.
std::vector<cudnnBackendNumericalNote_t> notes_of(cudnnBackendDescriptor_t cfg) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  MINIDL_CUDNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  MINIDL_CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                              static_cast<int64_t>(notes.size()), &n, notes.data()));
  notes.resize(static_cast<size_t>(n));
  return notes;
}

// PyTorch's filter (Conv_v8.cpp): true when the configuration may not run.
bool excluded(const std::vector<cudnnBackendNumericalNote_t>& notes, const ConvKey& key) {
  if (key.deterministic && has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) return true;
  if (has_note(notes, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)) return true;
  return key.dtype == DType::Float32 && !key.allow_tf32 && has_note(notes, CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
}

// The engine configurations of heuristics `mode`, best first.
std::vector<BackendDescriptor> engine_configs(const BackendDescriptor& graph, cudnnBackendHeurMode_t mode) {
  BackendDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (heur.finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS)
    return {};
  std::vector<BackendDescriptor> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  MINIDL_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()));
  cfgs.resize(static_cast<size_t>(count));
  return cfgs;
}

// The graph of one convolution node and its usable plans, best first
// (heuristics mode A, then the fallback list).
struct Candidates {
  std::vector<BackendDescriptor> parts;
  std::vector<std::unique_ptr<GraphPlan>> plans;
};

Candidates build(cudnnHandle_t h, const ConvShape& s, const ConvKey& key) {
  Candidates c;
  const int nd = s.nd();
  const OpNames names = op_names(key.direction);
  BackendDescriptor x = tensor(kUidX, s.x_sizes(), nd, key.dtype);
  BackendDescriptor w = tensor(kUidW, s.w_sizes(), nd, key.dtype);
  BackendDescriptor y = tensor(kUidY, s.y_sizes(), nd, key.dtype);
  BackendDescriptor conv = convolution(s, key.dtype);
  BackendDescriptor op(names.type);
  op.set_descriptor(names.x, x);
  op.set_descriptor(names.w, w);
  op.set_descriptor(names.y, y);
  op.set_descriptor(names.conv, conv);
  if (key.dtype == DType::Float64) {
    const double alpha = 1, beta = 0;
    op.set(names.alpha, CUDNN_TYPE_DOUBLE, &alpha);
    op.set(names.beta, CUDNN_TYPE_DOUBLE, &beta);
  } else {
    const float alpha = 1, beta = 0;
    op.set(names.alpha, CUDNN_TYPE_FLOAT, &alpha);
    op.set(names.beta, CUDNN_TYPE_FLOAT, &beta);
  }
  if (op.finalize() != CUDNN_STATUS_SUCCESS) return c;
  BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnBackendDescriptor_t ops[] = {op.get()};
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops, 1);
  graph.set(kGraphHandle, CUDNN_TYPE_HANDLE, &h);
  if (graph.finalize() != CUDNN_STATUS_SUCCESS) return c;

  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (BackendDescriptor& cfg : engine_configs(graph, mode)) {
      if (excluded(notes_of(cfg.get()), key)) continue;
      auto p = std::make_unique<GraphPlan>();
      p->plan = BackendDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p->plan.set(kPlanHandle, CUDNN_TYPE_HANDLE, &h);
      p->plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
      if (p->plan.finalize() != CUDNN_STATUS_SUCCESS) continue;
      int64_t n = 0;
      MINIDL_CUDNN_CHECK(cudnnBackendGetAttribute(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, &n, &p->workspace));
      p->parts.push_back(std::move(cfg));
      c.plans.push_back(std::move(p));
      if (!key.benchmark) break;  // the heuristic's first usable choice will do
    }
    if (!c.plans.empty() && !key.benchmark) break;
  }
  for (BackendDescriptor* d : {&x, &w, &y, &conv, &op, &graph}) c.parts.push_back(std::move(*d));
  return c;
}

Tensor workspace_for(int64_t bytes, int device) {
  if (bytes <= 0) return Tensor();
  return empty({bytes}, TensorOptions(kUInt8).device(Device(DeviceType::CUDA, device)));
}

void execute(cudnnHandle_t h, const GraphPlan& p, const void* x, const void* w, const void* y, void* ws) {
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[] = {kUidX, kUidW, kUidY};
  void* ptrs[] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs, 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws);
  MINIDL_CUDNN_CHECK(pack.finalize());
  MINIDL_CUDNN_CHECK(cudnnBackendExecute(h, p.plan.get(), pack.get()));
}

// Milliseconds of one run of `p` (the best of kTimedRuns after one warm-up);
// infinity when its workspace cannot be allocated or it fails to run.
float time_plan(cudnnHandle_t h, const GraphPlan& p, int device, const void* x, const void* w, const void* y) {
  cuda::check_not_capturing(cuda::current_stream(device), "timing cuDNN graph-API plans for a new convolution shape",
                            "it synchronizes; run a warm-up step before capturing");
  try {
    const Tensor ws = workspace_for(p.workspace, device);
    void* wsp = ws.defined() ? ws.raw_data() : nullptr;
    const cudaStream_t stream = cuda::current_stream(device);
    cudaEvent_t start = nullptr, stop = nullptr;
    MINIDL_CUDA_CHECK(cudaEventCreate(&start));
    MINIDL_CUDA_CHECK(cudaEventCreate(&stop));
    float best = std::numeric_limits<float>::infinity();
    execute(h, p, x, w, y, wsp);
    for (int r = 0; r < kTimedRuns; ++r) {
      MINIDL_CUDA_CHECK(cudaEventRecord(start, stream));
      execute(h, p, x, w, y, wsp);
      MINIDL_CUDA_CHECK(cudaEventRecord(stop, stream));
      MINIDL_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      MINIDL_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms);
    }
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    return best;
  } catch (const Error&) {
    return std::numeric_limits<float>::infinity();
  }
}

std::shared_ptr<const GraphPlan> choose(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x,
                                        const void* w, const void* y) {
  if (const auto hit = cache().find(key)) return *hit;
  Candidates c = build(h, s, key);
  std::shared_ptr<GraphPlan> chosen;
  if (!c.plans.empty()) {
    size_t best = 0;
    if (key.benchmark) {
      float best_ms = std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < c.plans.size() && i < static_cast<size_t>(kMaxTimedPlans); ++i) {
        const float ms = time_plan(h, *c.plans[i], key.device, x, w, y);
        if (ms < best_ms) best_ms = ms, best = i;
      }
    }
    chosen = std::move(c.plans[best]);
    for (BackendDescriptor& d : c.parts) chosen->parts.push_back(std::move(d));
  }
  return cache().insert(key, chosen);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// x, w, y in the operation's own roles (dx is "x" of backward data, dw "w" of backward filter).
bool run(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* w, const void* y) {
  if (!aligned16(x) || !aligned16(w) || !aligned16(y)) return false;
  const std::shared_ptr<const GraphPlan> p = choose(h, s, key, x, w, y);
  if (!p) return false;
  const Tensor ws = workspace_for(p->workspace, key.device);
  execute(h, *p, x, w, y, ws.defined() ? ws.raw_data() : nullptr);
  return true;  // ws goes back to the cache; the stream orders its reuse after this call
}

}  // namespace

bool graph_api_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MINIDL_CUDNN_GRAPH");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

bool graph_forward(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* w, void* y) {
  return run(h, s, key, x, w, y);
}

bool graph_backward_data(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* w, const void* dy,
                         void* dx) {
  return run(h, s, key, dx, w, dy);
}

bool graph_backward_filter(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* dy,
                           void* dw) {
  return run(h, s, key, x, dw, dy);
}

size_t conv_graph_cache_size() { return cache().size(); }
void clear_conv_graph_cache() { cache().clear(); }

}  // namespace minidl::cudnn_conv
