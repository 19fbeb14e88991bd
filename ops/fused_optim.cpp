// The kernel tables of ops/fused_optim.h; the CPU kernels are in
// ops/cpu/fused_optim.cpp, the callers in optim/.
#include "minidl/ops/fused_optim.h"

namespace minidl {

DispatchStub<SgdStepFn> sgd_step_stub("sgd_step");
DispatchStub<AdamStepFn> adam_step_stub("adam_step");
DispatchStub<VectorNormFn> vector_norm_stub("vector_norm");
DispatchStub<ClipGradScaleFn> clip_grad_scale_stub("clip_grad_scale");

}  // namespace minidl
