// minidl: the umbrella header for users.
#pragma once

#include "core/autograd/engine.h"
#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "ops/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "models/models.h"
#include "data/data.h"
