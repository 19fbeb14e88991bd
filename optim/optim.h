// Everything in optim/: the Optimizer base, SGD, Adam, AdamW, the learning-rate
// schedulers, gradient clipping, amp::GradScaler and amp::initialize.
#pragma once

#include "minidl/optim/adam.h"
#include "minidl/optim/amp_initialize.h"
#include "minidl/optim/clip_grad.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"
#include "minidl/optim/sgd.h"
