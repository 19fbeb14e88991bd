// Every op's public header.
#pragma once

#include "minidl/ops/batch_norm.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/dropout.h"
#include "minidl/ops/group_norm.h"
#include "minidl/ops/instance_norm.h"
#include "minidl/ops/interpolate.h"
#include "minidl/ops/layer_norm.h"
#include "minidl/ops/loss.h"
#include "minidl/ops/matmul.h"
#include "minidl/ops/pooling.h"
#include "minidl/ops/reduce.h"
#include "minidl/ops/shape_ops.h"
#include "minidl/ops/softmax.h"
#include "minidl/ops/unary.h"
