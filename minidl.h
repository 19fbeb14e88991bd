// minidl: the umbrella header for users.
#pragma once

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/engine.h"
#include "minidl/core/autograd/function.h"
#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/core/device.h"
#include "minidl/core/dtype.h"
#include "minidl/core/generator.h"
#include "minidl/core/parallel.h"
#include "minidl/core/safetensors.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/ops.h"
#include "minidl/nn/nn.h"
#include "minidl/optim/optim.h"
#include "minidl/models/models.h"
#include "minidl/data/data.h"
