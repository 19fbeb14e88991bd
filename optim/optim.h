// Everything in optim/: the Optimizer base, SGD, Adam, AdamW, the learning-rate
// schedulers and gradient clipping.
#pragma once

#include "minidl/optim/adam.h"
#include "minidl/optim/clip_grad.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"
#include "minidl/optim/sgd.h"
