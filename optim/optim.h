// Everything in optim/: the Optimizer base, SGD, Adam, AdamW, the learning-rate
// schedulers, gradient clipping and amp::GradScaler.
#pragma once

#include "minidl/optim/adam.h"
#include "minidl/optim/clip_grad.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"
#include "minidl/optim/sgd.h"
