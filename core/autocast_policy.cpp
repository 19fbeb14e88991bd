// The autocast policy table: which ops cast to what, per device type. Written
// like PyTorch's lists in aten/src/ATen/autocast_mode.cpp (TORCH_LIBRARY_IMPL
// blocks for AutocastCUDA and AutocastCPU, PyTorch 2.x) and docs/source/amp.rst,
// restricted to the ops minidl has. An op on no list falls through: it runs in
// the dtype of its inputs (relu, pooling, batch_norm, dropout, reshape, ...).
//
// PyTorch's outputs dtypes for these ops under CPU autocast are checked by
// tests/test_autocast_policy.cpp against a fixture the installed torch wrote
// (scripts/make_autocast_goldens.py); the CUDA lists against the documented ones.
#include "minidl/core/autocast.h"

namespace minidl::amp {

namespace {

using P = CastPolicy;

struct Entry {
  AmpOp op;
  CastPolicy policy;
};

// ---- CUDA (lower precision: float16 by default) -------------------------------
constexpr Entry kCuda[] = {
    // lower_precision_fp
    {AmpOp::conv2d, P::kLowerPrecisionFp},
    {AmpOp::conv3d, P::kLowerPrecisionFp},
    {AmpOp::conv_transpose2d, P::kLowerPrecisionFp},
    {AmpOp::conv_transpose3d, P::kLowerPrecisionFp},
    {AmpOp::matmul, P::kLowerPrecisionFp},
    {AmpOp::bmm, P::kLowerPrecisionFp},
    {AmpOp::linear, P::kLowerPrecisionFp},
    // fp32
    {AmpOp::exp, P::kFp32},
    {AmpOp::log, P::kFp32},
    {AmpOp::pow, P::kFp32},
    {AmpOp::softmax, P::kFp32},
    {AmpOp::log_softmax, P::kFp32},
    {AmpOp::sum, P::kFp32},
    {AmpOp::layer_norm, P::kFp32},
    {AmpOp::group_norm, P::kFp32},
    {AmpOp::cross_entropy, P::kFp32},
    {AmpOp::nll_loss, P::kFp32},
    {AmpOp::mse_loss, P::kFp32},
    {AmpOp::binary_cross_entropy_with_logits, P::kFp32},
    // banned: "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"
    {AmpOp::binary_cross_entropy, P::kBanned},
    // promote
    {AmpOp::cat, P::kPromote},
    {AmpOp::stack, P::kPromote},
    // Not autocast ops in PyTorch: its ordinary type promotion gives a mixed
    // add the widest dtype (of the tensors with dimensions, when any has).
    // minidl's binary ops refuse mixed dtypes outside autocast, so inside it
    // they promote explicitly to the same result.
    {AmpOp::add, P::kPromote},
    {AmpOp::sub, P::kPromote},
    {AmpOp::mul, P::kPromote},
    {AmpOp::div, P::kPromote},
};

// ---- CPU (lower precision: bfloat16 by default; float16 allowed) ---------------
// softmax, log_softmax, layer_norm, group_norm, sum, exp, log and pow are on no
// CPU list: with a bfloat16 input they run (and return) in bfloat16.
constexpr Entry kCpu[] = {
    // lower_precision_fp
    {AmpOp::conv2d, P::kLowerPrecisionFp},
    {AmpOp::conv3d, P::kLowerPrecisionFp},
    {AmpOp::conv_transpose2d, P::kLowerPrecisionFp},
    {AmpOp::conv_transpose3d, P::kLowerPrecisionFp},
    {AmpOp::matmul, P::kLowerPrecisionFp},
    {AmpOp::bmm, P::kLowerPrecisionFp},
    {AmpOp::linear, P::kLowerPrecisionFp},
    // fp32
    {AmpOp::max_pool3d, P::kFp32},
    {AmpOp::avg_pool3d, P::kFp32},
    {AmpOp::adaptive_max_pool3d, P::kFp32},
    {AmpOp::adaptive_avg_pool3d, P::kFp32},
    {AmpOp::cross_entropy, P::kFp32},
    {AmpOp::nll_loss, P::kFp32},
    {AmpOp::mse_loss, P::kFp32},
    {AmpOp::binary_cross_entropy, P::kFp32},
    {AmpOp::binary_cross_entropy_with_logits, P::kFp32},
    {AmpOp::reflection_pad1d, P::kFp32},  // pad's reflect over 1 or 2 dims, replicate over 1 to 3
    {AmpOp::reflection_pad2d, P::kFp32},
    {AmpOp::replication_pad1d, P::kFp32},
    {AmpOp::replication_pad2d, P::kFp32},
    {AmpOp::replication_pad3d, P::kFp32},
    // promote
    {AmpOp::cat, P::kPromote},
    {AmpOp::stack, P::kPromote},
    // As on CUDA: PyTorch's type promotion, made explicit.
    {AmpOp::add, P::kPromote},
    {AmpOp::sub, P::kPromote},
    {AmpOp::mul, P::kPromote},
    {AmpOp::div, P::kPromote},
};

template <size_t N>
CastPolicy lookup(const Entry (&table)[N], AmpOp op) {
  for (const Entry& e : table)
    if (e.op == op) return e.policy;
  return P::kFallthrough;
}

}  // namespace

CastPolicy cast_policy(DeviceType type, AmpOp op) {
  return type == DeviceType::CUDA ? lookup(kCuda, op) : lookup(kCpu, op);  // the test device runs CPU kernels
}

const char* amp_op_name(AmpOp op) {
  switch (op) {
#define MINIDL_AMP_NAME_(name) \
  case AmpOp::name: return #name;
    MINIDL_AMP_OPS(MINIDL_AMP_NAME_)
#undef MINIDL_AMP_NAME_
  }
  return "?";
}

const char* cast_policy_name(CastPolicy policy) {
  switch (policy) {
    case P::kFallthrough: return "fallthrough";
    case P::kLowerPrecisionFp: return "lower_precision_fp";
    case P::kFp32: return "fp32";
    case P::kPromote: return "promote";
    case P::kBanned: return "banned";
  }
  return "?";
}

}  // namespace minidl::amp
