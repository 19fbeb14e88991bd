// See conv_graph.h. Ran on an H100 as the default conv path (tests/test_cuda_blas_dnn and the
// training runs of scripts/gpu-check.sh, 2026-11-27).
#include "minidl/ops/cudnn/conv_graph.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "minidl/core/cuda/graph.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/cudnn/backend_descriptor.h"
#include "minidl/ops/cudnn/conv_graph_policy.h"
#include "minidl/ops/cudnn/descriptors.h"

namespace minidl::cudnn_conv {

namespace {

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';
constexpr size_t kMaxTimedPlans = 8;
constexpr int kTimedRuns = 3;

// The descriptors of one convolution node's graph: x, w, y, the convolution,
// the operation, the graph (last). Shared by every plan built from it.
using GraphParts = std::vector<BackendDescriptor>;

// A plan with everything it was built from (kept alive with it).
struct GraphPlan {
  std::shared_ptr<const GraphParts> graph;
  BackendDescriptor config;  // the engine configuration
  BackendDescriptor plan;
  int64_t workspace = 0;
};

// One plan cache per cuDNN handle; nullptr: no plan for this key (the legacy
// API runs it). A plan is built with a handle (graph and plan attributes) and
// is not safe to share between threads: PyTorch keeps its plans thread_local
// (Conv_v8.cpp: "cuDNN Execution Plans are not guaranteed to be thread safe
// across all engines"; pytorch/pytorch PR 103939). Here a handle belongs to
// one thread at a time (core/cuda/library_handles.h: per (thread, device),
// back to a pool at thread exit), so a cache per handle gives the same
// guarantee and lets a later thread that takes the handle (nn::DataParallel
// starts its workers per call) reuse the plans instead of searching again.
class PlanCaches {
 public:
  using Cache = ConvAlgoCache<std::shared_ptr<const GraphPlan>>;
  Cache& of(cudnnHandle_t h) {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Cache>& c = caches_[h];
    if (!c) c = std::make_unique<Cache>();
    return *c;  // stable: caches are never erased (handles are never destroyed either)
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [h, c] : caches_) n += c->size();
    return n;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [h, c] : caches_) c->clear();  // a plan in use lives on in its caller's shared_ptr
  }

 private:
  std::mutex mu_;
  std::map<cudnnHandle_t, std::unique_ptr<Cache>> caches_;
};

PlanCaches& caches() {
  // Never destroyed, as the handle pools: destroying cuDNN descriptors after
  // the CUDA runtime has unloaded at exit can crash.
  static auto* c = new PlanCaches;
  return *c;
}

std::atomic<int64_t> g_graph_calls{0}, g_legacy_calls{0};

// Every cuDNN 9 accepts the handle on the graph and the plan; 9.x marks
// these attribute names deprecated in favour of a device-properties
// descriptor that older 9.x libraries lack.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

// Attribute types and counts as cudnn-frontend's TensorBuilder_v8 and
// ConvDescBuilder_v8 (include/cudnn_frontend_Tensor.h, _ConvDesc.h): INT64
// dims/strides/uid/alignment, DATA_TYPE; not virtual (the default).
BackendDescriptor tensor(int64_t uid, const std::array<int64_t, 5>& sizes, const std::array<int64_t, 5>& strides,
                         int nd, DType dtype) {
  BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
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

// The numerical notes of an engine configuration's engine (as
// cudnn-frontend's hasNumericalNote, include/cudnn_frontend_Filters.h: an
// engine descriptor created first, filled by CUDNN_ATTR_ENGINECFG_ENGINE).
// nullopt when cuDNN does not say (the configuration is then skipped: an
// engine whose notes are unknown may be one the filter refuses).
std::optional<EngineNotes> notes_of(cudnnBackendDescriptor_t cfg) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
      CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  n = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(notes.size()), &n, notes.data()) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  EngineNotes r;
  for (int64_t i = 0; i < std::min<int64_t>(n, static_cast<int64_t>(notes.size())); ++i) {
    switch (notes[static_cast<size_t>(i)]) {
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: r.nondeterministic = true; break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: r.down_converts_inputs = true; break;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: r.tensor_core = true; break;
      default: break;
    }
  }
  return r;
}

// The engine configurations of heuristics `mode`, best first (as
// cudnn-frontend's EngineHeuristics_v8: the count first, then that many
// ENGINECFG descriptors created by the caller and filled by cuDNN). None when
// this mode does not apply to the graph.
std::vector<BackendDescriptor> engine_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode) {
  BackendDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (heur.finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return {};
  std::vector<BackendDescriptor> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  MINIDL_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return cfgs;
}

// The graph of one convolution node. Throws (cuDNN's status in the message)
// when cuDNN refuses a descriptor.
std::shared_ptr<const GraphParts> build_graph(cudnnHandle_t h, const ConvShape& s, const ConvKey& key) {
  const int nd = s.nd();
  const OpNames names = op_names(key.direction);
  auto parts = std::make_shared<GraphParts>();
  parts->push_back(tensor(kUidX, s.x_sizes(), s.x_strides(), nd, key.dtype));
  parts->push_back(tensor(kUidW, s.w_sizes(), s.w_strides(), nd, key.dtype));
  parts->push_back(tensor(kUidY, s.y_sizes(), s.y_strides(), nd, key.dtype));
  parts->push_back(convolution(s, key.dtype));
  // Groups have no attribute: cuDNN reads them from x's C over w's C/groups.
  BackendDescriptor op(names.type);
  op.set_descriptor(names.x, (*parts)[0]);
  op.set_descriptor(names.w, (*parts)[1]);
  op.set_descriptor(names.y, (*parts)[2]);
  op.set_descriptor(names.conv, (*parts)[3]);
  // alpha/beta: double when the compute type is double, else float
  // (cudnn-frontend OperationBuilder_v8::setcDesc sets alphabetaType so).
  if (key.dtype == DType::Float64) {
    const double alpha = 1, beta = 0;
    op.set(names.alpha, CUDNN_TYPE_DOUBLE, &alpha);
    op.set(names.beta, CUDNN_TYPE_DOUBLE, &beta);
  } else {
    const float alpha = 1, beta = 0;
    op.set(names.alpha, CUDNN_TYPE_FLOAT, &alpha);
    op.set(names.beta, CUDNN_TYPE_FLOAT, &beta);
  }
  MINIDL_CUDNN_CHECK(op.finalize());
  BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnBackendDescriptor_t ops[] = {op.get()};
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops, 1);
  graph.set(kGraphHandle, CUDNN_TYPE_HANDLE, &h);
  MINIDL_CUDNN_CHECK(graph.finalize());
  parts->push_back(std::move(op));
  parts->push_back(std::move(graph));
  return parts;
}

// An execution plan of one engine configuration; nullptr when it does not
// finalize (the engine does not support this problem).
std::shared_ptr<GraphPlan> make_plan(cudnnHandle_t h, const std::shared_ptr<const GraphParts>& graph,
                                     BackendDescriptor cfg) {
  auto p = std::make_shared<GraphPlan>();
  p->graph = graph;
  p->config = std::move(cfg);
  p->plan = BackendDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  p->plan.set(kPlanHandle, CUDNN_TYPE_HANDLE, &h);
  p->plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, p->config);
  if (p->plan.finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t n = 0;
  MINIDL_CUDNN_CHECK(cudnnBackendGetAttribute(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &n, &p->workspace));
  if (p->workspace < 0) return nullptr;  // cudnn-frontend computeWorkSpaceSize refuses it too
  return p;
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

// Runs `p` once with its own workspace. False when the workspace cannot be
// allocated or cuDNN refuses to run it: a plan that finalizes may still fail
// here, so PyTorch (Conv_v8.cpp try_configs) runs each candidate and keeps
// the first that succeeds.
bool try_run(cudnnHandle_t h, const GraphPlan& p, int device, const void* x, const void* w, const void* y) {
  try {
    const Tensor ws = workspace_for(p.workspace, device);
    execute(h, p, x, w, y, ws.defined() ? ws.raw_data() : nullptr);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A CUDA event destroyed on every path (the timing below may throw).
struct Event {
  cudaEvent_t e = nullptr;
  Event() { MINIDL_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// Milliseconds of one run of `p` (the best of kTimedRuns after one warm-up);
// infinity when its workspace cannot be allocated or it fails to run. The
// caller has checked that the stream is not capturing.
float time_plan(cudnnHandle_t h, const GraphPlan& p, int device, const void* x, const void* w, const void* y) {
  try {
    const Tensor ws = workspace_for(p.workspace, device);
    void* wsp = ws.defined() ? ws.raw_data() : nullptr;
    const cudaStream_t stream = cuda::current_stream(device);
    const Event start, stop;
    float best = std::numeric_limits<float>::infinity();
    execute(h, p, x, w, y, wsp);  // warm-up; `start` below waits for it on the stream
    for (int r = 0; r < kTimedRuns; ++r) {
      MINIDL_CUDA_CHECK(cudaEventRecord(start.e, stream));
      execute(h, p, x, w, y, wsp);
      MINIDL_CUDA_CHECK(cudaEventRecord(stop.e, stream));
      MINIDL_CUDA_CHECK(cudaEventSynchronize(stop.e));
      float ms = 0;
      MINIDL_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, stop.e));
      best = std::min(best, ms);
    }
    return best;
  } catch (const Error&) {
    return std::numeric_limits<float>::infinity();
  }
}

// Why a search found no plan, for the warning.
struct SearchLog {
  int offered = 0, excluded = 0, not_finalized = 0, failed_to_run = 0;
  std::string str() const {
    return "heuristics (mode A, then fallback) offered " + std::to_string(offered) + " engine configurations: " +
           std::to_string(excluded) + " excluded by their numerical notes (or unreadable notes), " +
           std::to_string(not_finalized) + " did not build an execution plan, " + std::to_string(failed_to_run) +
           " failed to run";
  }
};

// A plan for `key` that has just written y (the caller's output), or nullptr
// (log says why). Heuristics mode A, then the fallback list; without cudnn
// benchmark the first configuration that builds a plan and runs (only those
// plans are built); with it, the fastest of the first kMaxTimedPlans that
// build, run once more so that y is its result.
std::shared_ptr<const GraphPlan> search(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x,
                                        const void* w, const void* y, SearchLog& log) {
  const std::shared_ptr<const GraphParts> graph = build_graph(h, s, key);
  const cudnnBackendDescriptor_t g = graph->back().get();
  std::vector<std::shared_ptr<GraphPlan>> timed;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (BackendDescriptor& cfg : engine_configs(g, mode)) {
      ++log.offered;
      const std::optional<EngineNotes> notes = notes_of(cfg.get());
      if (!notes || engine_excluded(*notes, key)) {
        ++log.excluded;
        continue;
      }
      std::shared_ptr<GraphPlan> p = make_plan(h, graph, std::move(cfg));
      if (!p) {
        ++log.not_finalized;
        continue;
      }
      if (!key.benchmark) {
        if (try_run(h, *p, key.device, x, w, y)) return p;
        ++log.failed_to_run;
        continue;
      }
      timed.push_back(std::move(p));
      if (timed.size() == kMaxTimedPlans) break;
    }
    if (timed.size() == kMaxTimedPlans) break;
  }
  if (timed.empty()) return nullptr;
  std::vector<float> ms;
  for (const auto& p : timed) ms.push_back(time_plan(h, *p, key.device, x, w, y));
  const std::optional<size_t> best = fastest_plan(ms);
  if (best && try_run(h, *timed[*best], key.device, x, w, y)) return timed[*best];
  log.failed_to_run += best ? 1 : static_cast<int>(timed.size());
  return nullptr;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// x, w, y in the operation's own roles (dx is "x" of backward data, dw "w" of backward filter).
// True: y written through the graph API; false: the caller runs the legacy API.
bool run_graph(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* w,
               const void* y) {
  // Every tensor descriptor claims 16-byte alignment (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
  // a view at an odd offset goes to the legacy API instead.
  if (!aligned16(x) || !aligned16(w) || !aligned16(y)) return false;
  if (const auto hit = caches().of(h).find(key)) {
    if (!*hit) return false;
    Tensor ws;
    try {
      ws = workspace_for((*hit)->workspace, key.device);
    } catch (const Error&) {
      return false;  // out of memory: the legacy API may pick an algorithm with less workspace
    }
    execute(h, **hit, x, w, y, ws.defined() ? ws.raw_data() : nullptr);
    return true;  // ws goes back to the cache; the stream orders its reuse after this call
  }
  if (key.benchmark)
    cuda::check_not_capturing(cuda::current_stream(key.device),
                              "timing cuDNN graph-API plans for a new convolution shape",
                              "it synchronizes; run a warm-up step before capturing");
  SearchLog log;
  std::shared_ptr<const GraphPlan> p;
  std::string why;
  try {
    p = search(h, s, key, x, w, y, log);
    if (!p) why = log.str();
  } catch (const Error& e) {
    why = e.what();
  }
  caches().of(h).insert(key, p);
  if (!p) {
    std::fprintf(stderr,
                 "minidl warning: conv (cuDNN graph API): no plan for input %s, weight %s, "
                 "%s: %s; this shape runs on the legacy API\n",
                 shape_str(Shape(key.x_sizes.begin(), key.x_sizes.begin() + s.nd())).c_str(),
                 shape_str(Shape(key.w_sizes.begin(), key.w_sizes.begin() + s.nd())).c_str(),
                 dtype_name(key.dtype), why.c_str());
  }
  return p != nullptr;
}

bool run(cudnnHandle_t h, const ConvShape& s, const ConvKey& key, const void* x, const void* w, const void* y) {
  const bool ran = run_graph(h, s, key, x, w, y);
  (ran ? g_graph_calls : g_legacy_calls).fetch_add(1, std::memory_order_relaxed);
  return ran;
}

}  // namespace

bool graph_api_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MINIDL_CUDNN_GRAPH");  // "0": the legacy API only
    return v == nullptr || std::strcmp(v, "0") != 0;
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

size_t conv_graph_cache_size() { return caches().size(); }
void clear_conv_graph_cache() { caches().clear(); }

ConvGraphStats conv_graph_stats() {
  return {g_graph_calls.load(std::memory_order_relaxed), g_legacy_calls.load(std::memory_order_relaxed)};
}

}  // namespace minidl::cudnn_conv
